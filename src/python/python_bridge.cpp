// attn-tune's Python bridge: a kernel plugin (include/attn_tune/plugin.h) whose kernels are
// Python functions. `--kernels python:MODULE[:FACTORY]` loads this library; the host first
// calls attn_tune_python_bridge_select with the spec, then the plugin entry point, which starts
// an embedded CPython (honouring PYTHONPATH and an active virtual environment), imports the
// module and declares what it declares. Every call hands the module attn-tune's own buffers as
// torch tensors through DLPack (no copies), on the CPU or, for CUDA kernels, on the device and
// the stream attn-tune times. The Python half (bridge.py, compiled in) finds the kernels and
// formats exceptions; docs/python-kernels.md is the guide.
//
// This file holds the library's exported entry points and the plugin's functions; the rest of
// the bridge is interpreter.cpp (CPython, the GIL, errors), declaration.cpp (what the module
// declares), dlpack.cpp (buffers as capsules) and call.cpp (per-call objects), sharing
// bridge_internal.h.
#include "src/python/bridge_internal.h"

#include <cstdint>
#include <string>
#include <vector>

#include "include/attn_tune/plugin.h"

using namespace attn::python_bridge;

namespace {

std::string g_spec;       // MODULE[:FACTORY]
std::string g_python_dir; // attn-tune's python/ folder (attn_tune_torch), appended to sys.path

// ---- The plugin's functions ----------------------------------------------------------------
// bridge.py's `fn(index, config, call)` for a call's shapes alone (its tensors None), as can_run
// and workspace_size see it. A new reference, or null with a
// one-line reason in `why` (a family the module does not declare, or what Python raised).
PyObject* call_on_shapes(PyObject* fn, const char* what, const attn_config* config,
                         const attn_call* call, std::string& why) {
  const int idx = declared_index(call->family);
  if (idx < 0) {
    why = "family not declared by the module";
    return nullptr;
  }
  PyObject* scalars = scalars_tuple(call);
  PyObject* pycall =
      scalars ? PyObject_CallFunctionObjArgs(g_make_call, scalars, Py_None, nullptr) : nullptr;
  Py_XDECREF(scalars);
  PyObject* cfg = config_dict(config);
  PyObject* r = pycall != nullptr ? PyObject_CallFunction(fn, "iOO", idx, cfg, pycall) : nullptr;
  Py_XDECREF(pycall);
  Py_DECREF(cfg);
  if (r == nullptr) {
    why = std::string(what) + " raised " + python_error();
  }
  return r;
}

int bridge_can_run(void*, const attn_config* config, const attn_call* call, char* reason,
                   size_t reason_size) {
  Gil gil;
  std::string msg;
  PyObject* why = call_on_shapes(g_can_run, "can_run", config, call, msg);
  if (why == nullptr) {
    // Raised, not refused: -1, which attn-tune's side reads as the module's error (a refusal
    // would make the case vanish as "skipped").
    attn_plugin_write_message(reason, reason_size, msg.c_str());
    return -1;
  }
  int rc = 0;
  if (why != Py_None) {
    attn_plugin_write_message(reason, reason_size, str_of(why).c_str());
    rc = 1;
  }
  Py_DECREF(why);
  return rc;
}

// The scratch a family's `workspace` asks for, from the call's shapes (no tensors).
int bridge_workspace_size(void*, const attn_config* config, const attn_call* call, uint64_t* bytes,
                          char* err, size_t err_size) {
  Gil gil;
  *bytes = 0;
  std::string msg;
  PyObject* n = call_on_shapes(g_workspace_bytes, "workspace", config, call, msg);
  if (n == nullptr) {
    attn_plugin_write_message(err, err_size, msg.c_str());
    return 1;
  }
  *bytes = PyLong_AsUnsignedLongLong(n);
  Py_DECREF(n);
  return 0;
}

// bridge.py's `fn(index, config, call, stream)` on the call's tensors, with the run's workspace
// and the prepare step's state (`prepared`, borrowed, may be null) attached: a new reference, or
// null with a one-line reason in `why` (`what` names the step in it; "" for run, whose exception
// is the reason as it stands).
PyObject* call_on_tensors(PyObject* fn, const char* what, const attn_config* config,
                          const attn_call* call, void* workspace, uint64_t workspace_bytes,
                          PyObject* prepared, void* stream, std::string& why) {
  const int idx = declared_index(call->family);
  if (idx < 0) {
    why = "family not declared by the module";
    return nullptr;
  }
  PyObject* pycall = call_object(call);
  if (pycall == nullptr || !attach_run_state(pycall, call, workspace, workspace_bytes, prepared)) {
    why = "wrapping the buffers as tensors failed: " + python_error();
    return nullptr;
  }
  PyObject* cfg = config_dict(config);
  PyObject* st = PyLong_FromVoidPtr(stream);
  PyObject* r = PyObject_CallFunction(fn, "iOOO", idx, cfg, pycall, st);
  Py_DECREF(cfg);
  Py_DECREF(st);
  if (r == nullptr) {
    why = *what != '\0' ? std::string(what) + " raised " + python_error() : python_error();
  }
  return r;
}

// What one prepare step made: the module's dict, and the memory of the tensors in it.
struct Prepared {
  PyObject* state = nullptr; // owned
  std::vector<attn_memory_range> ranges;
};

// The family's prepare, untimed: the dict it returns is kept for every run as call.prepared.
int bridge_prepare(void*, const attn_config* config, const attn_call* call, void* workspace,
                   uint64_t workspace_bytes, void* stream, attn_prepared* out, char* err,
                   size_t err_size) {
  Gil gil;
  *out = attn_prepared{};
  std::string msg;
  PyObject* r = call_on_tensors(g_prepare, "prepare", config, call, workspace, workspace_bytes,
                                nullptr, stream, msg);
  if (r == nullptr) {
    attn_plugin_write_message(err, err_size, msg.c_str());
    return 1;
  }
  auto* p = new Prepared();
  PyObject* state = PyTuple_GetItem(r, 0);
  if (state != Py_None) {
    p->state = state;
    Py_INCREF(state);
  }
  PyObject* ranges = PyTuple_GetItem(r, 1);
  for (Py_ssize_t i = 0; i < PyList_Size(ranges); ++i) {
    PyObject* pair = PyList_GetItem(ranges, i);
    attn_memory_range m{};
    m.ptr = PyLong_AsVoidPtr(PyTuple_GetItem(pair, 0));
    m.bytes = PyLong_AsUnsignedLongLong(PyTuple_GetItem(pair, 1));
    p->ranges.push_back(m);
  }
  Py_DECREF(r);
  if (PyErr_Occurred()) {
    Py_XDECREF(p->state);
    delete p;
    const std::string msg = "prepare's result could not be read: " + python_error();
    attn_plugin_write_message(err, err_size, msg.c_str());
    return 1;
  }
  out->handle = p;
  out->ranges = p->ranges.empty() ? nullptr : p->ranges.data();
  out->num_ranges = int(p->ranges.size());
  return 0;
}

void bridge_release(void*, const attn_config*, attn_prepared* prepared) {
  auto* p = static_cast<Prepared*>(prepared->handle);
  if (p == nullptr) {
    return;
  }
  Gil gil;
  // The cached call holds the state as call.prepared: let go of it there too.
  drop_cached_call();
  Py_XDECREF(p->state);
  delete p;
  prepared->handle = nullptr;
}

int bridge_run(void*, const attn_config* config, const attn_call* call, void* workspace,
               uint64_t workspace_bytes, void* stream, char* err, size_t err_size) {
  Gil gil;
  const auto* p = static_cast<const Prepared*>(call->prepared);
  std::string msg;
  PyObject* r = call_on_tensors(g_run, "", config, call, workspace, workspace_bytes,
                                p != nullptr ? p->state : nullptr, stream, msg);
  if (r == nullptr) {
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
    drop_cached_call();
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
    const bool ok = take_declaration(decl, g_spec, why);
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
  api->kv_dtypes = g_decl.kv_dtypes.data();
  api->state = nullptr;
  api->can_run = bridge_can_run;
  api->workspace_size = bridge_workspace_size;
  api->run = bridge_run;
  api->destroy = bridge_destroy;
  api->engine_rule = g_decl.engine_rule.empty() ? nullptr : g_decl.engine_rule.c_str();
  api->prepare = g_decl.has_prepare ? bridge_prepare : nullptr;
  api->release = g_decl.has_prepare ? bridge_release : nullptr;
  return 0;
}

} // extern "C"
