// The Python objects one kernel call becomes: its configuration as a dict, its scalars as a
// tuple, and bridge.make_call's Call with the tensors, cached while the same call repeats.
#include "src/python/bridge_internal.h"

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace attn::python_bridge {

namespace {

// The last call's Python object: attn-tune times a configuration by calling it many times on
// the same buffers, so the tensors are wrapped once per distinct call, not per run.
struct CachedCall {
  std::vector<int64_t> key;
  PyObject* call = nullptr;
  void* workspace = nullptr; // what call.workspace wraps
  uint64_t workspace_bytes = 0;
  PyObject* prepared = nullptr; // what call.prepared holds (borrowed: the prepare step owns it)
};
CachedCall g_cached;

std::vector<int64_t> call_key(const attn_call* c) {
  float scale = c->scale, softcap = c->softcap;
  int32_t sbits = 0, cbits = 0;
  std::memcpy(&sbits, &scale, 4);
  std::memcpy(&cbits, &softcap, 4);
  auto ptr = [](const void* p) { return int64_t(reinterpret_cast<intptr_t>(p)); };
  std::vector<int64_t> key = {c->family,
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
          ptr(c->lse),
          c->kv_dtype,
          c->num_kv_scales,
          ptr(c->k_scale),
          ptr(c->v_scale)};
  // The lengths' values, not their address: the cached Call holds them as Python lists.
  for (const int32_t* lens : {c->seq_q_lens, c->seq_k_lens}) {
    key.push_back(lens != nullptr);
    for (int b = 0; lens != nullptr && b < c->batch; ++b) {
      key.push_back(lens[b]);
    }
  }
  return key;
}

// A list of the batch's lengths (ABI 3's seq_q_lens, seq_k_lens), or None where they are not set.
PyObject* lens_list(const int32_t* lens, int batch) {
  if (lens == nullptr) {
    Py_RETURN_NONE;
  }
  PyObject* l = PyList_New(batch);
  for (int b = 0; l != nullptr && b < batch; ++b) {
    PyList_SET_ITEM(l, b, PyLong_FromLong(lens[b]));
  }
  return l;
}

} // namespace

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
  return Py_BuildValue(
      "(iiiiiiiddiiiiiiiiiiNNii)", int(c->family), int(c->dtype), int(c->kv_layout), c->num_heads,
      c->num_kv_heads, c->head_dim, c->block_size, double(c->scale), double(c->softcap), c->causal,
      c->window_left, c->window_right, c->batch, c->num_rows, c->max_q_len, c->max_k_len,
      c->num_blocks, c->max_blocks_per_seq, c->host_threads, lens_list(c->seq_q_lens, c->batch),
      lens_list(c->seq_k_lens, c->batch), int(c->kv_dtype), c->num_kv_scales);
}

PyObject* call_object(const attn_call* c) {
  std::vector<int64_t> key = call_key(c);
  if (g_cached.call != nullptr && key == g_cached.key) {
    return g_cached.call;
  }
  Py_CLEAR(g_cached.call);
  PyObject* scalars = scalars_tuple(c);
  PyObject* caps = capsules_of(c, g_cuda);
  PyObject* call = nullptr;
  if (scalars != nullptr && caps != nullptr) {
    call = PyObject_CallFunctionObjArgs(g_make_call, scalars, caps, nullptr);
  }
  Py_XDECREF(scalars);
  Py_XDECREF(caps);
  if (call != nullptr) {
    g_cached.call = call;
    g_cached.key = std::move(key);
    // A new Call holds no workspace and no prepared state (make_call): what attach_run_state
    // compares with is that, not the call before's. With the call before's, a workspace that
    // came back at its address (and size) was never handed to the new Call, whose run got
    // None (an outside audit's module, now and then; tests/python/prepared_kernels.py's
    // attn_tune_kernels_workspace_only).
    g_cached.workspace = nullptr;
    g_cached.workspace_bytes = 0;
    g_cached.prepared = nullptr;
  }
  return call;
}

void drop_cached_call() {
  Py_CLEAR(g_cached.call);
  g_cached.key.clear();
  g_cached.workspace = nullptr;
  g_cached.workspace_bytes = 0;
  g_cached.prepared = nullptr;
}

bool attach_run_state(PyObject* call, const attn_call* c, void* workspace, uint64_t bytes,
                      PyObject* prepared) {
  const bool cached = call == g_cached.call;
  if (!cached || workspace != g_cached.workspace || bytes != g_cached.workspace_bytes) {
    PyObject* cap = workspace_capsule(c, workspace, bytes, g_cuda);
    PyObject* r = cap != nullptr
                      ? PyObject_CallFunctionObjArgs(g_set_workspace, call, cap, nullptr)
                      : nullptr;
    Py_XDECREF(cap);
    if (r == nullptr) {
      return false;
    }
    Py_DECREF(r);
    if (cached) {
      g_cached.workspace = workspace;
      g_cached.workspace_bytes = bytes;
    }
  }
  if (!cached || prepared != g_cached.prepared) {
    if (PyObject_SetAttrString(call, "prepared", prepared != nullptr ? prepared : Py_None) != 0) {
      return false;
    }
    if (cached) {
      g_cached.prepared = prepared;
    }
  }
  return true;
}

} // namespace attn::python_bridge
