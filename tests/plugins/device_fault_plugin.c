/* Test-only CUDA plugins, in C: each wraps the CUDA example plugin (loaded with dlopen from
 * $ATTN_WRAPPED_PLUGIN where set, as on a device machine's flat folder of prebuilt files, else
 * from the build's ATTN_WRAPPED_PLUGIN) and plants one fault that only the checks around a device
 * run can see, since every value it leaves in out and lse is right.
 *
 * FAULT_PAST_OUT: after the example's kernels, stores 8 bytes just past the end of out (an
 * off-by-one store of a vectorised tail); the guard after out must see it.
 *
 * FAULT_KEEP_OUTPUT: keeps its last answer in device memory, keyed by the addresses of its
 * buffers and the call's shapes, options and lengths (as a cache of converted K/V or a plan keyed
 * by pointers would), and answers a call that matches them with it, however the buffers' contents
 * changed; the call after the inputs were rewritten in place shows it.
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "include/attn_tune/plugin.h"

static attn_plugin_api wrapped;

static size_t out_bytes(const attn_call* a) {
  const size_t e = a->dtype == ATTN_DTYPE_F32 ? 4 : 2;
  return (size_t)a->num_rows * (size_t)a->num_heads * (size_t)a->head_dim * e;
}

static size_t lse_bytes(const attn_call* a) {
  return (size_t)a->num_rows * (size_t)a->num_heads * sizeof(float);
}

static int cuda_failed(cudaError_t e, const char* what, char* err, size_t size) {
  if (e == cudaSuccess) {
    return 0;
  }
  attn_plugin_write_message(err, size, what);
  return 1;
}

#ifdef FAULT_KEEP_OUTPUT
/* The last call's buffers, shapes and options, its sequences' lengths, and its out and lse in
 * device memory of our own. */
enum { kMaxBatch = 4096 };
static attn_call last;
static int32_t last_lens[2 * kMaxBatch];
static int have_last = 0;
static void* kept = NULL;
static size_t kept_bytes = 0;

/* Whether `a` is the last call again: the same buffers, shapes, options and lengths, whatever the
 * buffers now hold. A fresh problem that gets the same addresses mostly differs in its options or
 * lengths; one that does not is answered wrongly, as such a cache would answer it. */
static int same_call(const attn_call* a) {
  const attn_call* b = &last;
  if (!have_last || a->batch != b->batch) {
    return 0;
  }
  const size_t lens = (size_t)a->batch * sizeof(int32_t);
  return a->query == b->query && a->key_cache == b->key_cache && a->value_cache == b->value_cache &&
         a->out == b->out && a->lse == b->lse && a->family == b->family && a->dtype == b->dtype &&
         a->kv_dtype == b->kv_dtype && a->num_rows == b->num_rows && a->num_heads == b->num_heads &&
         a->num_kv_heads == b->num_kv_heads && a->head_dim == b->head_dim &&
         a->block_size == b->block_size && a->num_blocks == b->num_blocks &&
         a->max_blocks_per_seq == b->max_blocks_per_seq && a->scale == b->scale &&
         a->softcap == b->softcap && a->causal == b->causal && a->window_left == b->window_left &&
         a->window_right == b->window_right && memcmp(a->seq_q_lens, last_lens, lens) == 0 &&
         memcmp(a->seq_k_lens, last_lens + kMaxBatch, lens) == 0;
}

static void remember(const attn_call* a) {
  last = *a;
  have_last = a->batch <= kMaxBatch;
  if (have_last) {
    memcpy(last_lens, a->seq_q_lens, (size_t)a->batch * sizeof(int32_t));
    memcpy(last_lens + kMaxBatch, a->seq_k_lens, (size_t)a->batch * sizeof(int32_t));
  }
}
#endif

static int faulty_run(void* state, const attn_config* c, const attn_call* a, void* ws,
                      uint64_t ws_bytes, void* stream, char* err, size_t size) {
  cudaStream_t s = (cudaStream_t)stream;
  const size_t ob = out_bytes(a);
  const size_t lb = lse_bytes(a);
#ifdef FAULT_KEEP_OUTPUT
  if (same_call(a) && kept_bytes >= ob + lb) {
    if (cuda_failed(cudaMemcpyAsync(a->out, kept, ob, cudaMemcpyDeviceToDevice, s), "copy", err,
                    size) ||
        cuda_failed(cudaMemcpyAsync(a->lse, (char*)kept + ob, lb, cudaMemcpyDeviceToDevice, s),
                    "copy", err, size)) {
      return 1;
    }
    return 0;
  }
#endif
  if (wrapped.run(state, c, a, ws, ws_bytes, stream, err, size) != 0) {
    return 1;
  }
#ifdef FAULT_PAST_OUT
  if (cuda_failed(cudaMemsetAsync((char*)a->out + ob, 0, 8, s), "memset past out", err, size)) {
    return 1;
  }
#endif
#ifdef FAULT_KEEP_OUTPUT
  if (kept_bytes < ob + lb) {
    if (kept != NULL) {
      cudaFree(kept);
      kept = NULL;
    }
    kept_bytes = 0;
    if (cuda_failed(cudaMalloc(&kept, ob + lb), "cudaMalloc", err, size)) {
      return 1;
    }
    kept_bytes = ob + lb;
  }
  if (cuda_failed(cudaMemcpyAsync(kept, a->out, ob, cudaMemcpyDeviceToDevice, s), "keep", err,
                  size) ||
      cuda_failed(cudaMemcpyAsync((char*)kept + ob, a->lse, lb, cudaMemcpyDeviceToDevice, s),
                  "keep", err, size)) {
    return 1;
  }
  remember(a);
#endif
  (void)ob;
  (void)lb;
  (void)s;
  return 0;
}

__attribute__((visibility("default"))) int attn_tune_plugin_init(uint32_t host_abi_version,
                                                                 attn_plugin_api* api,
                                                                 size_t api_size, char* err,
                                                                 size_t err_size) {
  ATTN_PLUGIN_CHECK_HOST(host_abi_version, api, api_size, err, err_size);
  const char* path = getenv("ATTN_WRAPPED_PLUGIN");
  void* lib =
      dlopen(path != NULL && path[0] != '\0' ? path : ATTN_WRAPPED_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    attn_plugin_write_message(err, err_size, "cannot load the wrapped CUDA example plugin");
    return 1;
  }
  attn_plugin_init_fn init = (attn_plugin_init_fn)dlsym(lib, ATTN_PLUGIN_ENTRY_NAME);
  if (init == NULL || init(host_abi_version, &wrapped, sizeof wrapped, err, err_size) != 0) {
    return 1;
  }
  *api = wrapped;
#if defined(FAULT_PAST_OUT)
  api->name = "cuda-example-past-out";
#else
  api->name = "cuda-example-keep-output";
#endif
  api->run = faulty_run;
  return 0;
}
