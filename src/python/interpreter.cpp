// The Python bridge's embedded interpreter: starting CPython once per process (fork-aware, in a
// library that was dlopened privately), loading bridge.py and turning exceptions into one line.
#include "src/python/bridge_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace attn::python_bridge {

PyObject* g_glue = nullptr;
PyObject* g_load = nullptr;
PyObject* g_make_call = nullptr;
PyObject* g_can_run = nullptr;
PyObject* g_run = nullptr;
PyObject* g_describe = nullptr;
PyObject* g_workspace_bytes = nullptr;
PyObject* g_set_workspace = nullptr;
PyObject* g_prepare = nullptr;

namespace {

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

} // namespace

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
    text = str_of(s);
    Py_XDECREF(s);
    PyErr_Clear();
  }
  if (text.empty() && value != nullptr) {
    PyObject* s = PyObject_Str(value);
    text = s != nullptr && PyUnicode_Check(s) ? str_of(s) : "unprintable exception";
    Py_XDECREF(s);
    PyErr_Clear();
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return text;
}

// Python starts in whichever process first calls into the bridge: the declaration probe or a
// worker (children that end without forking), or attn-tune itself under --in-process and in
// tests, which may fork afterwards (a test process that ran Python kernels goes on to probe
// modules and supervise workers). So the interpreter is made fork-aware as os.fork would
// (PyOS_*Fork around every fork); a process that never forks never runs the hooks.
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
    // A venv that is not there would be passed over in silence, and the module imported from
    // the system's site-packages instead: say so (the probe's error is one line, exit 2).
    if (::access(exe.c_str(), F_OK) != 0) {
      err = "VIRTUAL_ENV is '" + std::string(venv) +
            "', which has no bin/python3: activate an "
            "existing virtual environment or unset VIRTUAL_ENV";
      return false;
    }
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
  g_workspace_bytes = PyObject_GetAttrString(mod, "workspace_bytes");
  g_set_workspace = PyObject_GetAttrString(mod, "set_workspace");
  g_prepare = PyObject_GetAttrString(mod, "prepare");
  if (!g_load || !g_make_call || !g_can_run || !g_run || !g_describe || !g_workspace_bytes ||
      !g_set_workspace || !g_prepare) {
    err = "the bridge's own Python lacks a function: " + python_error();
    return false;
  }
  return true;
}

} // namespace attn::python_bridge
