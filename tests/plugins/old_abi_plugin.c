/* A test-only plugin as a build against an older plugin ABI (version 0, a smaller table) would
 * be: the host must refuse it with one line, never read past what it filled. */
#include <stddef.h>
#include <stdint.h>

struct old_api {
  uint32_t abi_version;
  uint32_t api_size;
  const char* name;
  int (*run)(void* state, const void* call);
};

__attribute__((visibility("default"))) int attn_tune_plugin_init(uint32_t host_abi_version,
                                                                 void* api, size_t api_size,
                                                                 char* err, size_t err_size) {
  (void)host_abi_version;
  (void)err;
  (void)err_size;
  if (api_size < sizeof(struct old_api)) {
    return 1;
  }
  struct old_api* t = (struct old_api*)api;
  t->abi_version = 0;
  t->api_size = (uint32_t)sizeof(struct old_api);
  t->name = "old-abi";
  t->run = NULL;
  return 0;
}
