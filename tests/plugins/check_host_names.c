/* Compiled, not run: ATTN_PLUGIN_CHECK_HOST takes an init function's arguments whatever the
 * plugin names them (an audit's plugin named its table size `sz`, which the macro's parameter
 * `api_size`, substituted into `(api)->api_size`, turned into a member that does not exist). A
 * build of the tests fails if that comes back. */
#include "include/attn_tune/plugin.h"

int check_host_names_init(uint32_t v, attn_plugin_api* table, size_t sz, char* msg,
                          size_t msg_size);

int check_host_names_init(uint32_t v, attn_plugin_api* table, size_t sz, char* msg,
                          size_t msg_size) {
  ATTN_PLUGIN_CHECK_HOST(v, table, sz, msg, msg_size);
  return 0;
}
