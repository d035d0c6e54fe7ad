// attn-tune's Python bridge: a kernel plugin (include/attn_tune/plugin.h) whose kernels are
// Python functions. `--kernels python:MODULE[:FACTORY]` loads this library; the host first
// calls attn_tune_python_bridge_select with the spec, then the plugin entry point, which starts
// an embedded CPython (honouring PYTHONPATH and an active virtual environment), imports the
// module and declares what it declares. Every call hands the module attn-tune's own buffers as
// torch tensors through DLPack (no copies), on the CPU or, for CUDA kernels, on the device and
// the stream attn-tune times. The Python half (bridge.py, compiled in) finds the kernels and
// formats exceptions; docs/python-kernels.md is the guide.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <pthread.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "include/attn_tune/plugin.h"

extern const char kAttnBridgeSource[]; // bridge.py (generated from src/python/bridge.py)

namespace {

// ---- DLPack 0.x, the exchange format torch.utils.dlpack reads (dmlc/dlpack's C ABI). -------
struct DLDevice {
  int32_t device_type; // 1: CPU, 2: CUDA
  int32_t device_id;
};
struct DLDataType {
  uint8_t code; // 0: int, 1: uint, 2: float, 4: bfloat
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides; // in elements
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
constexpr int32_t kDLCPU = 1;
constexpr int32_t kDLCUDA = 2;

// One tensor's description with its shape and strides; freed by the consumer's deleter.
struct Wrapped {
  DLManagedTensor managed{};
  int64_t shape[5] = {};
  int64_t strides[5] = {};
};

void delete_wrapped(DLManagedTensor* m) { delete static_cast<Wrapped*>(m->manager_ctx); }

void capsule_destructor(PyObject* capsule) {
  // Still named "dltensor": nobody consumed it, so its memory is ours to free.
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    m->deleter(m);
  }
}

// A DLPack capsule viewing `data` (row-major, `shape`), or a new None when data is null.
PyObject* capsule(const void* data, DLDataType dt, std::initializer_list<int64_t> shape,
                  DLDevice dev) {
  if (data == nullptr) {
    Py_RETURN_NONE;
  }
  auto* w = new Wrapped();
  int n = 0;
  for (int64_t s : shape) {
    w->shape[n++] = s;
  }
  int64_t stride = 1;
  for (int i = n - 1; i >= 0; --i) {
    w->strides[i] = stride;
    stride *= w->shape[i];
  }
  DLTensor& t = w->managed.dl_tensor;
  t.data = const_cast<void*>(data);
  t.device = dev;
  t.ndim = n;
  t.dtype = dt;
  t.shape = w->shape;
  t.strides = w->strides;
  w->managed.manager_ctx = w;
  w->managed.deleter = delete_wrapped;
  PyObject* cap = PyCapsule_New(&w->managed, "dltensor", capsule_destructor);
  if (cap == nullptr) {
    delete w;
  }
  return cap;
}

// ---- State ---------------------------------------------------------------------------------
std::string g_spec;       // MODULE[:FACTORY]
std::string g_python_dir; // attn-tune's python/ folder (attn_tune_torch), appended to sys.path
std::string g_identity;   // {"module": ..., "sources_sha256": ..., "file": ...} as JSON text
PyObject* g_glue = nullptr;
PyObject* g_load = nullptr;
PyObject* g_make_call = nullptr;
PyObject* g_can_run = nullptr;
PyObject* g_run = nullptr;
PyObject* g_describe = nullptr;
bool g_cuda = false;

// The declaration, kept alive for the host (plugin.h: until destroy).
struct Decl {
  std::string name;
  std::string version;
  std::vector<std::string> param_names; // stable storage for the names
  std::vector<std::vector<int>> param_values;
  std::vector<std::vector<attn_param_space>> spaces; // per family
  std::vector<attn_family_decl> families;
};
Decl g_decl;

// The last call's Python object: attn-tune times a configuration by calling it many times on
// the same buffers, so the tensors are wrapped once per distinct call, not per run.
struct CachedCall {
  std::vector<int64_t> key;
  PyObject* call = nullptr;
};
CachedCall g_cached;

class Gil {
public:
  Gil() : state_(PyGILState_Ensure()) {}
  ~Gil() { PyGILState_Release(state_); }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

private:
  PyGILState_STATE state_;
};

// The pending Python exception as one line (bridge.describe), cleared.
std::string python_error() {
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  if (type == nullptr) {
    return "unknown Python error";
  }
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != nullptr && value != nullptr) {
    PyException_SetTraceback(value, tb);
  }
  std::string text;
  if (g_describe != nullptr && value != nullptr) {
    PyObject* s = PyObject_CallOneArg(g_describe, value);
    if (s != nullptr && PyUnicode_Check(s)) {
      text = PyUnicode_AsUTF8(s);
    }
    Py_XDECREF(s);
    PyErr_Clear();
  }
  if (text.empty() && value != nullptr) {
    PyObject* s = PyObject_Str(value);
    text = s != nullptr && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : "unprintable exception";
    Py_XDECREF(s);
    PyErr_Clear();
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return text;
}

// ---- The interpreter -----------------------------------------------------------------------
PyGILState_STATE g_fork_gil;
void before_fork() {
  g_fork_gil = PyGILState_Ensure();
  PyOS_BeforeFork();
}
void after_fork_parent() {
  PyOS_AfterFork_Parent();
  PyGILState_Release(g_fork_gil);
}
void after_fork_child() {
  PyOS_AfterFork_Child();
  PyGILState_Release(g_fork_gil);
}

// Starts CPython once per process. attn-tune forks its workers after loading the plugin, so
// the interpreter is made fork-aware as os.fork would (PyOS_*Fork around every fork).
bool start_python(std::string& err) {
  if (Py_IsInitialized()) {
    return true;
  }
  // This library was dlopened privately; extension modules (torch's among them) expect
  // libpython's symbols in the global scope, as in a `python` process. Promote libpython.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&Py_InitializeFromConfig), &info) != 0 &&
      info.dli_fname != nullptr) {
    if (dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) == nullptr) {
      err = std::string("cannot make libpython's symbols global: ") + dlerror();
      return false;
    }
  }
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.install_signal_handlers = 0; // Ctrl-C and the supervisor's signals stay attn-tune's
  config.parse_argv = 0;
  // The interpreter finds its prefix, and an active virtual environment's site-packages, from
  // the executable it believes it is: the venv's python when one is active, else the Python
  // this bridge was built against.
  std::string exe = ATTN_PYTHON_EXECUTABLE;
  if (const char* venv = std::getenv("VIRTUAL_ENV"); venv != nullptr && *venv != '\0') {
    exe = std::string(venv) + "/bin/python3";
  }
  PyStatus st = PyConfig_SetBytesString(&config, &config.executable, exe.c_str());
  if (!PyStatus_Exception(st)) {
    st = PyConfig_SetBytesString(&config, &config.program_name, exe.c_str());
  }
  if (!PyStatus_Exception(st)) {
    char arg0[] = "attn-tune";
    char* argv[] = {arg0};
    st = PyConfig_SetBytesArgv(&config, 1, argv);
  }
  if (!PyStatus_Exception(st)) {
    st = Py_InitializeFromConfig(&config);
  }
  PyConfig_Clear(&config);
  if (PyStatus_Exception(st)) {
    err = std::string("cannot start Python: ") + (st.err_msg ? st.err_msg : "unknown error");
    return false;
  }
  PyEval_SaveThread(); // the GIL is taken per call
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
  return true;
}

// Runs bridge.py as module _attn_tune_bridge and looks up its functions.
bool load_glue(std::string& err) {
  if (g_glue != nullptr) {
    return true;
  }
  PyObject* code = Py_CompileString(kAttnBridgeSource, "<attn-tune python bridge>", Py_file_input);
  if (code == nullptr) {
    err = "the bridge's own Python does not compile: " + python_error();
    return false;
  }
  PyObject* mod = PyImport_ExecCodeModuleEx("_attn_tune_bridge", code, "<attn-tune python bridge>");
  Py_DECREF(code);
  if (mod == nullptr) {
    err = "the bridge's own Python failed: " + python_error();
    return false;
  }
  g_glue = mod;
  g_load = PyObject_GetAttrString(mod, "load");
  g_make_call = PyObject_GetAttrString(mod, "make_call");
  g_can_run = PyObject_GetAttrString(mod, "can_run");
  g_run = PyObject_GetAttrString(mod, "run");
  g_describe = PyObject_GetAttrString(mod, "describe");
  if (!g_load || !g_make_call || !g_can_run || !g_run || !g_describe) {
    err = "the bridge's own Python lacks a function: " + python_error();
    return false;
  }
  return true;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

const char* str_of(PyObject* o) {
  return o != nullptr && PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : "";
}

// Fills g_decl from bridge.load's tuple.
bool take_declaration(PyObject* decl, std::string& err) {
  PyObject* fams = PyTuple_GetItem(decl, 3);
  g_decl = Decl{};
  g_decl.name = str_of(PyTuple_GetItem(decl, 0));
  g_decl.version = str_of(PyTuple_GetItem(decl, 1));
  g_cuda = std::strcmp(str_of(PyTuple_GetItem(decl, 2)), "cuda") == 0;
  g_identity = "{\"module\": \"" + json_escape(g_spec) + "\", \"sources_sha256\": \"" +
               json_escape(str_of(PyTuple_GetItem(decl, 4))) + "\", \"file\": \"" +
               json_escape(str_of(PyTuple_GetItem(decl, 5))) + "\"}";
  const Py_ssize_t nf = PyList_Size(fams);
  // Reserve first: the declaration points into these vectors.
  std::size_t total_params = 0;
  for (Py_ssize_t i = 0; i < nf; ++i) {
    total_params += std::size_t(PyList_Size(PyTuple_GetItem(PyList_GetItem(fams, i), 3)));
  }
  g_decl.param_names.reserve(total_params);
  g_decl.param_values.reserve(total_params);
  g_decl.spaces.resize(std::size_t(nf));
  for (Py_ssize_t i = 0; i < nf; ++i) {
    PyObject* f = PyList_GetItem(fams, i);
    attn_family_decl d{};
    // bridge.load gives the family and layout as their ABI numbers.
    d.family = attn_family(PyLong_AsLong(PyTuple_GetItem(f, 0)));
    d.kv_layout = attn_kv_layout(PyLong_AsLong(PyTuple_GetItem(f, 1)));
    d.writes_lse = PyObject_IsTrue(PyTuple_GetItem(f, 2)) == 1 ? 1 : 0;
    PyObject* params = PyTuple_GetItem(f, 3);
    auto& space = g_decl.spaces[std::size_t(i)];
    for (Py_ssize_t k = 0; k < PyList_Size(params); ++k) {
      PyObject* p = PyList_GetItem(params, k);
      g_decl.param_names.emplace_back(str_of(PyTuple_GetItem(p, 0)));
      std::vector<int> vals;
      PyObject* vs = PyTuple_GetItem(p, 1);
      for (Py_ssize_t j = 0; j < PyList_Size(vs); ++j) {
        vals.push_back(int(PyLong_AsLong(PyList_GetItem(vs, j))));
      }
      g_decl.param_values.push_back(std::move(vals));
      attn_param_space ps{};
      ps.name = g_decl.param_names.back().c_str();
      ps.values = g_decl.param_values.back().data();
      ps.num_values = int(g_decl.param_values.back().size());
      space.push_back(ps);
    }
    d.params = space.empty() ? nullptr : space.data();
    d.num_params = int(space.size());
    g_decl.families.push_back(d);
  }
  if (PyErr_Occurred()) {
    err = "the module's declaration could not be read: " + python_error();
    return false;
  }
  return true;
}

int declared_index(attn_family f) {
  for (std::size_t i = 0; i < g_decl.families.size(); ++i) {
    if (g_decl.families[i].family == f) {
      return int(i);
    }
  }
  return -1;
}

PyObject* config_dict(const attn_config* c) {
  PyObject* d = PyDict_New();
  for (int i = 0; c != nullptr && i < c->num_params; ++i) {
    PyObject* v = PyLong_FromLong(c->values[i]);
    PyDict_SetItemString(d, c->names[i], v);
    Py_DECREF(v);
  }
  return d;
}

PyObject* scalars_tuple(const attn_call* c) {
  return Py_BuildValue("(iiiiiiiddiiiiiiiiii)", int(c->family), int(c->dtype), int(c->kv_layout),
                       c->num_heads, c->num_kv_heads, c->head_dim, c->block_size, double(c->scale),
                       double(c->softcap), c->causal, c->window_left, c->window_right, c->batch,
                       c->num_rows, c->max_q_len, c->max_k_len, c->num_blocks,
                       c->max_blocks_per_seq, c->host_threads);
}

// Which CUDA device a pointer lives on (CUDA kernels), through the driver the process already
// has loaded; 0 when it cannot tell.
int device_of(const void* p) {
  using GetAttr = int (*)(void*, int, unsigned long long);
  static GetAttr get = [] {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h == nullptr) {
      h = dlopen("libcuda.so.1", RTLD_NOW);
    }
    return h != nullptr ? reinterpret_cast<GetAttr>(dlsym(h, "cuPointerGetAttribute")) : nullptr;
  }();
  int ordinal = 0;
  constexpr int kDeviceOrdinal = 9; // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
  if (get != nullptr && p != nullptr &&
      get(&ordinal, kDeviceOrdinal, reinterpret_cast<unsigned long long>(p)) != 0) {
    ordinal = 0;
  }
  return ordinal;
}

// The buffers of `c` as DLPack capsules, in bridge._TENSORS order.
PyObject* capsules_of(const attn_call* c) {
  const DLDevice dev = g_cuda ? DLDevice{kDLCUDA, device_of(c->query)} : DLDevice{kDLCPU, 0};
  const DLDataType dt = c->dtype == ATTN_DTYPE_F32   ? DLDataType{2, 32, 1}
                        : c->dtype == ATTN_DTYPE_F16 ? DLDataType{2, 16, 1}
                                                     : DLDataType{4, 16, 1};
  const DLDataType i32{0, 32, 1};
  const DLDataType f32{2, 32, 1};
  const int64_t nb = c->num_blocks, kvh = c->num_kv_heads, bs = c->block_size, d = c->head_dim;
  const int64_t x = c->dtype == ATTN_DTYPE_F32 ? 4 : 8;
  PyObject *k = nullptr, *v = nullptr;
  switch (c->kv_layout) {
  case ATTN_KV_NHD:
    k = capsule(c->key_cache, dt, {nb, bs, kvh, d}, dev);
    v = capsule(c->value_cache, dt, {nb, bs, kvh, d}, dev);
    break;
  case ATTN_KV_VLLM:
    k = capsule(c->key_cache, dt, {nb, kvh, d / x, bs, x}, dev);
    v = capsule(c->value_cache, dt, {nb, kvh, d, bs}, dev);
    break;
  default:
    k = capsule(c->key_cache, dt, {nb, kvh, bs, d}, dev);
    v = capsule(c->value_cache, dt, {nb, kvh, bs, d}, dev);
    break;
  }
  const int64_t rows = c->num_rows, h = c->num_heads, b = c->batch;
  PyObject* items[9] = {
      capsule(c->query, dt, {rows, h, d}, dev),
      k,
      v,
      capsule(c->block_tables, i32, {b, c->max_blocks_per_seq}, dev),
      capsule(c->context_lens, i32, {b}, dev),
      capsule(c->cu_seqlens_q, i32, {b + 1}, dev),
      capsule(c->cu_seqlens_k, i32, {b + 1}, dev),
      capsule(c->out, dt, {rows, h, d}, dev),
      capsule(c->lse, f32, {rows, h}, dev),
  };
  PyObject* t = PyTuple_New(9);
  for (int i = 0; i < 9; ++i) {
    if (items[i] == nullptr) {
      Py_DECREF(t);
      for (int j = i + 1; j < 9; ++j) {
        Py_XDECREF(items[j]);
      }
      return nullptr;
    }
    PyTuple_SET_ITEM(t, i, items[i]);
  }
  return t;
}

std::vector<int64_t> call_key(const attn_call* c) {
  float scale = c->scale, softcap = c->softcap;
  int32_t sbits = 0, cbits = 0;
  std::memcpy(&sbits, &scale, 4);
  std::memcpy(&cbits, &softcap, 4);
  auto ptr = [](const void* p) { return int64_t(reinterpret_cast<intptr_t>(p)); };
  return {c->family,
          c->dtype,
          c->kv_layout,
          c->num_heads,
          c->num_kv_heads,
          c->head_dim,
          c->block_size,
          sbits,
          cbits,
          c->causal,
          c->window_left,
          c->window_right,
          c->batch,
          c->num_rows,
          c->max_q_len,
          c->max_k_len,
          c->num_blocks,
          c->max_blocks_per_seq,
          c->host_threads,
          ptr(c->query),
          ptr(c->key_cache),
          ptr(c->value_cache),
          ptr(c->block_tables),
          ptr(c->context_lens),
          ptr(c->cu_seqlens_q),
          ptr(c->cu_seqlens_k),
          ptr(c->out),
          ptr(c->lse)};
}

// The Python Call for `c` with its tensors (reused while the call is the same).
PyObject* call_object(const attn_call* c) {
  std::vector<int64_t> key = call_key(c);
  if (g_cached.call != nullptr && key == g_cached.key) {
    return g_cached.call;
  }
  Py_CLEAR(g_cached.call);
  PyObject* scalars = scalars_tuple(c);
  PyObject* caps = capsules_of(c);
  PyObject* call = nullptr;
  if (scalars != nullptr && caps != nullptr) {
    call = PyObject_CallFunctionObjArgs(g_make_call, scalars, caps, nullptr);
  }
  Py_XDECREF(scalars);
  Py_XDECREF(caps);
  if (call != nullptr) {
    g_cached.call = call;
    g_cached.key = std::move(key);
  }
  return call;
}

// ---- The plugin's functions ----------------------------------------------------------------
int bridge_can_run(void*, const attn_config* config, const attn_call* call, char* reason,
                   size_t reason_size) {
  Gil gil;
  const int idx = declared_index(call->family);
  if (idx < 0) {
    attn_plugin_write_message(reason, reason_size, "family not declared by the module");
    return 1;
  }
  PyObject* scalars = scalars_tuple(call);
  PyObject* pycall =
      scalars ? PyObject_CallFunctionObjArgs(g_make_call, scalars, Py_None, nullptr) : nullptr;
  Py_XDECREF(scalars);
  PyObject* cfg = config_dict(config);
  PyObject* why = nullptr;
  if (pycall != nullptr) {
    why = PyObject_CallFunction(g_can_run, "iOO", idx, cfg, pycall);
  }
  Py_XDECREF(pycall);
  Py_DECREF(cfg);
  if (why == nullptr) {
    const std::string msg = "can_run raised " + python_error();
    attn_plugin_write_message(reason, reason_size, msg.c_str());
    return 1;
  }
  int rc = 0;
  if (why != Py_None) {
    attn_plugin_write_message(reason, reason_size, str_of(why));
    rc = 1;
  }
  Py_DECREF(why);
  return rc;
}

int bridge_workspace_size(void*, const attn_config*, const attn_call*, uint64_t* bytes, char*,
                          size_t) {
  *bytes = 0; // Python kernels allocate their own scratch (torch's caching allocator)
  return 0;
}

int bridge_run(void*, const attn_config* config, const attn_call* call, void*, uint64_t,
               void* stream, char* err, size_t err_size) {
  Gil gil;
  const int idx = declared_index(call->family);
  if (idx < 0) {
    attn_plugin_write_message(err, err_size, "family not declared by the module");
    return 1;
  }
  PyObject* pycall = call_object(call);
  if (pycall == nullptr) {
    const std::string msg = "wrapping the buffers as tensors failed: " + python_error();
    attn_plugin_write_message(err, err_size, msg.c_str());
    return 1;
  }
  PyObject* cfg = config_dict(config);
  PyObject* st = PyLong_FromVoidPtr(stream);
  PyObject* r = PyObject_CallFunction(g_run, "iOOO", idx, cfg, pycall, st);
  Py_DECREF(cfg);
  Py_DECREF(st);
  if (r == nullptr) {
    const std::string msg = python_error();
    attn_plugin_write_message(err, err_size, msg.c_str());
    return 1;
  }
  Py_DECREF(r);
  return 0;
}

void bridge_destroy(void*) {
  // The interpreter stays up (extension modules such as torch cannot be unloaded and loaded
  // again); only the cached call is dropped.
  if (Py_IsInitialized()) {
    Gil gil;
    Py_CLEAR(g_cached.call);
    g_cached.key.clear();
  }
}

} // namespace

extern "C" {

// Called by the host before the entry point: which module to load (MODULE[:FACTORY]) and
// where attn-tune's own python/ folder is. Returns nonzero with a message on bad arguments.
__attribute__((visibility("default"))) int attn_tune_python_bridge_select(const char* spec,
                                                                          const char* python_dir,
                                                                          char* err,
                                                                          size_t err_size) {
  if (spec == nullptr || *spec == '\0') {
    attn_plugin_write_message(err, err_size, "no module given (python:MODULE[:FACTORY])");
    return 1;
  }
  g_spec = spec;
  g_python_dir = python_dir != nullptr ? python_dir : "";
  return 0;
}

// {"module", "sources_sha256", "file"} of the loaded module, as JSON; "" before init.
__attribute__((visibility("default"))) const char* attn_tune_python_bridge_identity() {
  return g_identity.c_str();
}

__attribute__((visibility("default"))) int attn_tune_plugin_init(uint32_t host_abi_version,
                                                                 attn_plugin_api* api,
                                                                 size_t api_size, char* err,
                                                                 size_t err_size) {
  ATTN_PLUGIN_CHECK_HOST(host_abi_version, api, api_size, err, err_size);
  std::string why;
  if (g_spec.empty()) {
    attn_plugin_write_message(err, err_size,
                              "the Python bridge was loaded without a module (the host calls "
                              "attn_tune_python_bridge_select first)");
    return 1;
  }
  if (!start_python(why)) {
    attn_plugin_write_message(err, err_size, why.c_str());
    return 1;
  }
  {
    Gil gil;
    if (!load_glue(why)) {
      attn_plugin_write_message(err, err_size, why.c_str());
      return 1;
    }
    PyObject* decl = PyObject_CallFunction(g_load, "ss", g_spec.c_str(), g_python_dir.c_str());
    if (decl == nullptr) {
      why = python_error();
      attn_plugin_write_message(err, err_size, why.c_str());
      return 1;
    }
    const bool ok = take_declaration(decl, why);
    Py_DECREF(decl);
    if (!ok) {
      attn_plugin_write_message(err, err_size, why.c_str());
      return 1;
    }
  }
  api->name = g_decl.name.c_str();
  api->version = g_decl.version.c_str();
  api->device_kind = g_cuda ? ATTN_DEVICE_CUDA : ATTN_DEVICE_HOST;
  api->families = g_decl.families.data();
  api->num_families = int(g_decl.families.size());
  api->state = nullptr;
  api->can_run = bridge_can_run;
  api->workspace_size = bridge_workspace_size;
  api->run = bridge_run;
  api->destroy = bridge_destroy;
  return 0;
}

} // extern "C"
