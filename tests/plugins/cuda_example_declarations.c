/* Loads plugins/cuda_example with dlopen, as attn-tune does, and checks what it declares and
 * what its host-side functions answer; nothing here launches a kernel, so no GPU is needed.
 * Usage: cuda_example_declarations PATH.so; exit 0 when every check holds. */
#include "attn_tune/plugin.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      printf("FAILED line %d: %s\n", __LINE__, #cond);                                             \
      ++failures;                                                                                  \
    }                                                                                              \
  } while (0)

static const char* const kNames[] = {"partition", "threads"};

/* A decode call of the shapes only, as can_run and workspace_size receive it. */
static attn_call decode_call(attn_family family) {
  attn_call c;
  memset(&c, 0, sizeof c);
  c.family = family;
  c.dtype = ATTN_DTYPE_F16;
  c.kv_layout = ATTN_KV_NHD;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 128;
  c.block_size = 16;
  c.scale = 0.0883883f;
  c.causal = 1;
  c.window_left = -1;
  c.window_right = -1;
  c.batch = 3;
  c.num_rows = 3;
  c.max_q_len = 1;
  c.max_k_len = 1000;
  c.num_blocks = 300;
  c.max_blocks_per_seq = 63;
  return c;
}

static int param_is(const attn_param_space* p, const char* name, const int* values, int n) {
  int i;
  if (strcmp(p->name, name) != 0 || p->num_values != n) {
    return 0;
  }
  for (i = 0; i < n; ++i) {
    if (p->values[i] != values[i]) {
      return 0;
    }
  }
  return 1;
}

int main(int argc, char** argv) {
  void* lib;
  attn_plugin_init_fn init;
  attn_plugin_api api;
  char msg[256];
  int f, p;

  if (argc != 2) {
    printf("usage: %s PATH.so\n", argv[0]);
    return 2;
  }
  lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    printf("FAILED: dlopen: %s\n", dlerror());
    return 1;
  }
  /* ISO C forbids converting void* to a function pointer; POSIX dlsym needs it: copy the bits. */
  {
    void* sym = dlsym(lib, ATTN_PLUGIN_ENTRY_NAME);
    if (sym == NULL) {
      printf("FAILED: no %s: %s\n", ATTN_PLUGIN_ENTRY_NAME, dlerror());
      return 1;
    }
    memcpy(&init, &sym, sizeof init);
  }

  /* A host speaking another ABI version is refused, and still learns the plugin's version. */
  memset(&api, 0, sizeof api);
  CHECK(init(ATTN_PLUGIN_ABI_VERSION + 1, &api, sizeof api, msg, sizeof msg) != 0);
  CHECK(api.abi_version == ATTN_PLUGIN_ABI_VERSION);
  CHECK(strstr(msg, "ABI") != NULL);
  /* So is a table smaller than the plugin's. */
  memset(&api, 0, sizeof api);
  CHECK(init(ATTN_PLUGIN_ABI_VERSION, &api, sizeof api - 1, msg, sizeof msg) != 0);

  memset(&api, 0, sizeof api);
  msg[0] = '\0';
  if (init(ATTN_PLUGIN_ABI_VERSION, &api, sizeof api, msg, sizeof msg) != 0) {
    printf("FAILED: init: %s\n", msg);
    return 1;
  }
  CHECK(api.abi_version == ATTN_PLUGIN_ABI_VERSION);
  CHECK(api.api_size == sizeof(attn_plugin_api));
  CHECK(strcmp(api.name, "cuda-example") == 0);
  CHECK(strcmp(api.version, "1.0") == 0);
  CHECK(api.device_kind == ATTN_DEVICE_CUDA);
  CHECK(api.can_run != NULL && api.workspace_size != NULL && api.run != NULL);
  CHECK(api.num_families == 3);
  if (api.num_families != 3 || api.can_run == NULL || api.workspace_size == NULL ||
      api.run == NULL) {
    return 1;
  }

  printf("%s %s (ABI %u), %d families:\n", api.name, api.version, api.abi_version,
         api.num_families);
  for (f = 0; f < api.num_families; ++f) {
    const attn_family_decl* d = &api.families[f];
    printf("  family %d layout %d writes_lse %d:", (int)d->family, (int)d->kv_layout,
           d->writes_lse);
    for (p = 0; p < d->num_params; ++p) {
      int v;
      printf(" %s {", d->params[p].name);
      for (v = 0; v < d->params[p].num_values; ++v) {
        printf(v ? ",%d" : "%d", d->params[p].values[v]);
      }
      printf("}");
    }
    printf("\n");
    CHECK(d->kv_layout == ATTN_KV_NHD);
    CHECK(d->writes_lse == 1);
  }
  {
    static const int v1_threads[] = {64, 128, 256};
    static const int v2_partitions[] = {256, 512, 1024};
    static const int v2_threads[] = {128, 256};
    static const int q_tiles[] = {4, 8, 16};
    const attn_family_decl* d = api.families;
    CHECK(d[0].family == ATTN_FAMILY_DECODE_V1 && d[0].num_params == 1 &&
          param_is(&d[0].params[0], "threads", v1_threads, 3));
    CHECK(d[1].family == ATTN_FAMILY_DECODE_V2 && d[1].num_params == 2 &&
          param_is(&d[1].params[0], "partition", v2_partitions, 3) &&
          param_is(&d[1].params[1], "threads", v2_threads, 2));
    CHECK(d[2].family == ATTN_FAMILY_PREFILL && d[2].num_params == 1 &&
          param_is(&d[2].params[0], "q_tile", q_tiles, 3));
  }

  /* can_run and workspace_size see shapes only; they answer without a GPU. */
  {
    int values[2] = {256, 128};
    attn_config v2 = {kNames, values, 2};
    attn_config v1 = {kNames + 1, values + 1, 1};
    attn_call c = decode_call(ATTN_FAMILY_DECODE_V2);
    uint64_t bytes = 1;

    CHECK(api.can_run(api.state, &v2, &c, msg, sizeof msg) == 0);
    CHECK(api.workspace_size(api.state, &v2, &c, &bytes, msg, sizeof msg) == 0);
    /* ceil(1000 / 256) = 4 partitions of (head_dim + 2) floats per (sequence, head). */
    CHECK(bytes == (uint64_t)3 * 8 * 4 * (128 + 2) * 4);

    c.block_size = 48; /* 256 is not a multiple of 48 */
    CHECK(api.can_run(api.state, &v2, &c, msg, sizeof msg) != 0);
    CHECK(strstr(msg, "partition 256 is not a multiple of block_size 48") != NULL);
    c.block_size = 16;
    c.head_dim = 512;
    CHECK(api.can_run(api.state, &v2, &c, msg, sizeof msg) != 0);
    CHECK(strstr(msg, "head_dim 512") != NULL);
    c.head_dim = 128;
    c.kv_layout = ATTN_KV_HND;
    CHECK(api.can_run(api.state, &v2, &c, msg, sizeof msg) != 0);
    CHECK(strstr(msg, "NHD") != NULL);
    c.kv_layout = ATTN_KV_NHD;
    values[1] = 96; /* not a declared thread count */
    CHECK(api.can_run(api.state, &v2, &c, msg, sizeof msg) != 0);
    CHECK(strstr(msg, "threads 96") != NULL);
    values[1] = 128;

    /* A workspace smaller than declared is refused before anything is launched. */
    CHECK(api.run(api.state, &v2, &c, NULL, 0, NULL, msg, sizeof msg) != 0);
    CHECK(strstr(msg, "workspace") != NULL);

    c = decode_call(ATTN_FAMILY_DECODE_V1);
    bytes = 1;
    CHECK(api.can_run(api.state, &v1, &c, msg, sizeof msg) == 0);
    CHECK(api.workspace_size(api.state, &v1, &c, &bytes, msg, sizeof msg) == 0);
    CHECK(bytes == 0);
    /* decode_v1 reads only the parameters it declares. */
    CHECK(api.can_run(api.state, &v2, &c, msg, sizeof msg) == 0);
    c.family = ATTN_FAMILY_PREFILL;
    CHECK(api.can_run(api.state, &v1, &c, msg, sizeof msg) != 0);
    CHECK(strstr(msg, "q_tile") != NULL);
  }

  if (api.destroy != NULL) {
    api.destroy(api.state);
  }
  dlclose(lib);
  if (failures != 0) {
    printf("%d checks failed\n", failures);
    return 1;
  }
  printf("cuda-example declarations: all checks passed\n");
  return 0;
}
