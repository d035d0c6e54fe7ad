/* Test-only plugins, in C (which also proves the ABI header works from C): each wraps the CPU
 * example plugin (loaded with dlopen from ATTN_WRAPPED_PLUGIN) and changes one thing.
 *   WRAP_MASK_BUG  forgets window_left (a planted mask bug: only windowed cases go wrong)
 *   WRAP_CRASH     segfaults in run for decode_v2 with partition 512 (a crashing kernel)
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "include/attn_tune/plugin.h"

static attn_plugin_api wrapped;

static int wrapped_can_run(void* state, const attn_config* c, const attn_call* a, char* reason,
                           size_t size) {
  return wrapped.can_run(state, c, a, reason, size);
}

static int wrapped_workspace(void* state, const attn_config* c, const attn_call* a, uint64_t* bytes,
                             char* err, size_t size) {
  return wrapped.workspace_size(state, c, a, bytes, err, size);
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
#ifdef WRAP_MASK_BUG
  api->name = "cpu-example-mask-bug";
#else
  api->name = "cpu-example-crash";
#endif
  api->can_run = wrapped_can_run;
  api->workspace_size = wrapped_workspace;
  api->run = changed_run;
  return 0;
}
