/* Test-only plugins, in C (which also proves the ABI header works from C): each wraps the CPU
 * example plugin (loaded with dlopen from ATTN_WRAPPED_PLUGIN) and changes one thing.
 *   WRAP_MASK_BUG  forgets window_left (a planted mask bug: only windowed cases go wrong)
 *   WRAP_CRASH     segfaults in run for decode_v2 with partition 512 (a crashing kernel)
 *   WRAP_LAYOUT    declares ATTN_KV_NHD or ATTN_KV_VLLM (the value of WRAP_LAYOUT) for every
 *                  family and reads the caches in that layout, rearranging them into HND in its
 *                  workspace before the wrapped kernels run: a plugin of that layout, for the
 *                  tests that replay files in each layout through a plugin of the same one.
 *                  fp8 caches (ABI 4) too, as the CPU example reads them: one byte per element,
 *                  x = 16 in the vllm layout.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "include/attn_tune/plugin.h"

static attn_plugin_api wrapped;

#ifdef WRAP_LAYOUT
static attn_family_decl families[3];

/* The caches' element size: one byte for an fp8 cache (ABI 4), else the query dtype's. */
static size_t element_bytes(const attn_call* a) {
  if (a->kv_dtype != ATTN_KV_DTYPE_AUTO) {
    return 1;
  }
  return a->dtype == ATTN_DTYPE_F32 ? 4 : 2;
}

static uint64_t cache_bytes(const attn_call* a) {
  return (uint64_t)a->num_blocks * (uint64_t)a->num_kv_heads * (uint64_t)a->block_size *
         (uint64_t)a->head_dim * element_bytes(a);
}

/* The wrapped workspace, rounded up to 64 bytes, then the HND key and value caches. */
static uint64_t wrapped_bytes(uint64_t b) { return (b + 63) / 64 * 64; }

/* Copies one cache from this plugin's layout into HND; `is_key` picks vllm's key or value. */
static void to_hnd(const attn_call* a, const unsigned char* src, unsigned char* dst, int is_key) {
  const size_t e = element_bytes(a);
  const int64_t H = a->num_kv_heads, B = a->block_size, D = a->head_dim;
  const int64_t x = (int64_t)(16 / e);
  for (int64_t blk = 0; blk < a->num_blocks; ++blk) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t s = 0; s < B; ++s) {
        for (int64_t d = 0; d < D; ++d) {
          int64_t from;
          if (WRAP_LAYOUT == ATTN_KV_NHD) {
            from = ((blk * B + s) * H + h) * D + d;
          } else if (is_key) {
            from = (((blk * H + h) * (D / x) + d / x) * B + s) * x + d % x;
          } else {
            from = ((blk * H + h) * D + d) * B + s;
          }
          memcpy(dst + (size_t)(((blk * H + h) * B + s) * D + d) * e, src + (size_t)from * e, e);
        }
      }
    }
  }
}
#endif

static int wrapped_can_run(void* state, const attn_config* c, const attn_call* a, char* reason,
                           size_t size) {
#ifdef WRAP_LAYOUT
  if (a->kv_layout != WRAP_LAYOUT) {
    attn_plugin_write_message(reason, size, "the caches arrived in another layout");
    return 1;
  }
  attn_call hnd = *a;
  hnd.kv_layout = ATTN_KV_HND;
  return wrapped.can_run(state, c, &hnd, reason, size);
#else
  return wrapped.can_run(state, c, a, reason, size);
#endif
}

static int wrapped_workspace(void* state, const attn_config* c, const attn_call* a, uint64_t* bytes,
                             char* err, size_t size) {
#ifdef WRAP_LAYOUT
  attn_call hnd = *a;
  hnd.kv_layout = ATTN_KV_HND;
  const int rc = wrapped.workspace_size(state, c, &hnd, bytes, err, size);
  *bytes = wrapped_bytes(*bytes) + 2 * cache_bytes(a);
  return rc;
#else
  return wrapped.workspace_size(state, c, a, bytes, err, size);
#endif
}

static int config_value(const attn_config* c, const char* name) {
  for (int i = 0; i < c->num_params; ++i) {
    if (strcmp(c->names[i], name) == 0) {
      return c->values[i];
    }
  }
  return -1;
}

static int changed_run(void* state, const attn_config* c, const attn_call* a, void* ws,
                       uint64_t ws_bytes, void* stream, char* err, size_t size) {
  attn_call call = *a;
#ifdef WRAP_MASK_BUG
  call.window_left = -1;
#endif
#ifdef WRAP_CRASH
  if (a->family == ATTN_FAMILY_DECODE_V2 && config_value(c, "partition") == 512) {
    volatile uintptr_t addr = 8;
    *(volatile int*)addr = 1; /* a wild store, as a kernel bug makes */
    raise(SIGSEGV);
  }
#endif
#ifdef WRAP_LAYOUT
  {
    uint64_t inner = 0;
    attn_call shape = call;
    shape.kv_layout = ATTN_KV_HND;
    if (wrapped.workspace_size(state, c, &shape, &inner, err, size) != 0) {
      return 1;
    }
    unsigned char* key = (unsigned char*)ws + wrapped_bytes(inner);
    unsigned char* value = key + cache_bytes(a);
    to_hnd(a, (const unsigned char*)a->key_cache, key, 1);
    to_hnd(a, (const unsigned char*)a->value_cache, value, 0);
    call.kv_layout = ATTN_KV_HND;
    call.key_cache = key;
    call.value_cache = value;
    ws_bytes = inner;
  }
#endif
  (void)config_value;
  return wrapped.run(state, c, &call, ws, ws_bytes, stream, err, size);
}

__attribute__((visibility("default"))) int attn_tune_plugin_init(uint32_t host_abi_version,
                                                                 attn_plugin_api* api,
                                                                 size_t api_size, char* err,
                                                                 size_t err_size) {
  ATTN_PLUGIN_CHECK_HOST(host_abi_version, api, api_size, err, err_size);
  void* lib = dlopen(ATTN_WRAPPED_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    attn_plugin_write_message(err, err_size, "cannot load the wrapped CPU example plugin");
    return 1;
  }
  attn_plugin_init_fn init = (attn_plugin_init_fn)dlsym(lib, ATTN_PLUGIN_ENTRY_NAME);
  if (init == NULL || init(host_abi_version, &wrapped, sizeof wrapped, err, err_size) != 0) {
    return 1;
  }
  *api = wrapped;
#if defined(WRAP_MASK_BUG)
  api->name = "cpu-example-mask-bug";
#elif defined(WRAP_CRASH)
  api->name = "cpu-example-crash";
#else
  api->name = WRAP_LAYOUT == ATTN_KV_NHD ? "cpu-example-nhd" : "cpu-example-vllm";
  for (int i = 0; i < wrapped.num_families && i < 3; ++i) {
    families[i] = wrapped.families[i];
    families[i].kv_layout = (attn_kv_layout)WRAP_LAYOUT;
  }
  api->families = families;
#endif
  api->can_run = wrapped_can_run;
  api->workspace_size = wrapped_workspace;
  api->run = changed_run;
  return 0;
}
