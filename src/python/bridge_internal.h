// What the Python bridge's files (src/python/*.cpp) share: the interpreter and bridge.py's
// functions, the module's declaration, DLPack capsules and per-call objects. Private to the
// bridge library, whose hidden visibility keeps all of it unexported.
#pragma once
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

#include "include/attn_tune/plugin.h"

extern const char kAttnBridgeSource[]; // bridge.py (generated from src/python/bridge.py)

namespace attn::python_bridge {

// ---- The interpreter (interpreter.cpp) ------------------------------------------------------

// Holds the GIL for a scope; the interpreter runs with it released between calls.
class Gil {
public:
  Gil() : state_(PyGILState_Ensure()) {}
  ~Gil() { PyGILState_Release(state_); }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

private:
  PyGILState_STATE state_;
};

// Starts CPython once per process, fork-aware; false with `err` set when it cannot.
bool start_python(std::string& err);
// Runs bridge.py as module _attn_tune_bridge and sets the g_ functions below (GIL held).
bool load_glue(std::string& err);
// The pending Python exception as one line (bridge.describe), cleared.
std::string python_error();

// bridge.py's module and functions, null until load_glue succeeds.
extern PyObject* g_glue;
extern PyObject* g_load;
extern PyObject* g_make_call;
extern PyObject* g_can_run;
extern PyObject* g_run;
extern PyObject* g_describe;
extern PyObject* g_workspace_bytes;
extern PyObject* g_set_workspace;
extern PyObject* g_prepare;

// ---- The module's declaration (declaration.cpp) ---------------------------------------------

// The declaration, kept alive for the host (plugin.h: until destroy).
struct Decl {
  std::string name;
  std::string version;
  std::string engine_rule; // "" when the module names none
  bool has_prepare = false; // some family declares prepare
  std::vector<std::string> param_names; // stable storage for the names
  std::vector<std::vector<int>> param_values;
  std::vector<std::vector<attn_param_space>> spaces; // per family
  std::vector<attn_family_decl> families;
  std::vector<uint32_t> kv_dtypes; // per family: ATTN_KV_DTYPE_BIT of each fp8 cache it reads
};
extern Decl g_decl;
extern bool g_cuda;            // the module's kernels run on CUDA devices
extern std::string g_identity; // {"module": ..., "sources_sha256": ..., "file": ...} as JSON text

// Fills g_decl, g_cuda and g_identity from bridge.load's tuple for module `spec`.
bool take_declaration(PyObject* decl, const std::string& spec, std::string& err);
// Index of family `f` in g_decl.families, or -1 when the module does not declare it.
int declared_index(attn_family f);
// The text of a Python str as UTF-8 (lone surrogates escaped), or "" for anything else.
std::string str_of(PyObject* o);

// ---- DLPack capsules (dlpack.cpp) -----------------------------------------------------------

// The buffers of `c` as DLPack capsules, in bridge._TENSORS order, on the CUDA device that holds
// them when `cuda`, else on the CPU. A new reference, or null with a Python error set.
PyObject* capsules_of(const attn_call* c, bool cuda);
// The run's workspace as a DLPack capsule of `bytes` uint8 on the call's device, or a new None
// when there is none.
PyObject* workspace_capsule(const attn_call* c, void* workspace, uint64_t bytes, bool cuda);

// ---- Per-call objects (call.cpp) ------------------------------------------------------------

// The configuration's parameters as a new dict {name: value}.
PyObject* config_dict(const attn_config* c);
// The call's scalars and its sequences' lengths (lists, or None) as a new tuple, in the order
// bridge.make_call reads them.
PyObject* scalars_tuple(const attn_call* c);
// The Python Call for `c` with its tensors (reused while the call is the same); a borrowed
// reference owned by the cache, or null with a Python error set.
PyObject* call_object(const attn_call* c);
// Drops the cached call (GIL held).
void drop_cached_call();
// Hands `call` the run's workspace (wrapped again only when it moved) and the prepare step's
// state (`prepared`, borrowed; null: None). False with a Python error set.
bool attach_run_state(PyObject* call, const attn_call* c, void* workspace, uint64_t bytes,
                      PyObject* prepared);

} // namespace attn::python_bridge
