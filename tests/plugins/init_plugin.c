/* A test-only plugin whose init does what $ATTN_TEST_INIT says, to prove that a plugin's init
 * runs outside attn-tune's own process (docs/plugins.md, "Where your code runs"):
 *   abort   aborts (a crash AddressSanitizer leaves alone, so that the sanitized build prints the
 *           same one line as the normal one)
 *   exit    calls exit(0)
 *   hang    never returns
 *   ENTRY:ACTION   declares as below, accepts every call, and does ACTION in ENTRY, one of
 *                  can_run, workspace, run, destroy; ACTION is segv (a write through a null
 *                  pointer), abort, exit0, exit7 (exit with that status) or hang
 *                  (tests/fuzz/hostile_plugins.py tries each pair)
 *   refuse-early   returns 3 with a reason before it sets any ABI version
 *   decl:WHAT      a declaration with garbage in it: WHAT is families (a pointer to nowhere),
 *                  count (2^30 families behind a pointer to one), negative (-5 families),
 *                  params (a parameter list at a garbage address), name (a name pointer to
 *                  nowhere), newline (a name with a newline in it), kv_dtypes (an fp8 mask
 *                  with a bit no format has), null_families (3 families, no array),
 *                  writes_lse (2, neither 0 nor 1) or negative_params (-1 parameters);
 *                  attn-tune reads declarations in its probe, never in its own process
 *   fp8-refused    declares that decode_v1 reads fp8_e4m3 caches, and refuses every call as the
 *                  default does: a declaration verify and plugin check hold it to
 *   other   (or unset) declares decode_v1 without parameters, refusing every call, with that
 *           text as its version: a process that sees another value than the declaration probe
 *           saw sees another declaration.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/attn_tune/plugin.h"

static const attn_family_decl families[1] = {{ATTN_FAMILY_DECODE_V1, ATTN_KV_HND, 1, NULL, 0}};
static char version[64];

static int refuse(void* state, const attn_config* c, const attn_call* a, char* reason,
                  size_t size) {
  (void)state;
  (void)c;
  (void)a;
  attn_plugin_write_message(reason, size, "this test plugin runs nothing");
  return 1;
}

static int accept(void* state, const attn_config* c, const attn_call* a, char* reason,
                  size_t size) {
  (void)state;
  (void)c;
  (void)a;
  (void)reason;
  (void)size;
  return 0;
}

/* The ENTRY:ACTION mode: where to misbehave and how. */
static char fault_entry[32];
static char fault_action[32];

static void misbehave(const char* entry) {
  if (strcmp(entry, fault_entry) != 0) {
    return;
  }
  if (strcmp(fault_action, "segv") == 0) {
    volatile int* nowhere = NULL;
    *nowhere = 1;
  } else if (strcmp(fault_action, "abort") == 0) {
    abort();
  } else if (strcmp(fault_action, "exit0") == 0) {
    exit(0);
  } else if (strcmp(fault_action, "exit7") == 0) {
    exit(7);
  } else if (strcmp(fault_action, "hang") == 0) {
    for (;;) {
      pause();
    }
  }
}

static int faulty_can_run(void* state, const attn_config* c, const attn_call* a, char* reason,
                          size_t size) {
  misbehave("can_run");
  return accept(state, c, a, reason, size);
}

static int faulty_workspace(void* state, const attn_config* c, const attn_call* a,
                            uint64_t* bytes, char* err, size_t size) {
  (void)state;
  (void)c;
  (void)a;
  (void)err;
  (void)size;
  misbehave("workspace");
  *bytes = 0;
  return 0;
}

static int faulty_run(void* state, const attn_config* c, const attn_call* a, void* ws, uint64_t n,
                      void* stream, char* err, size_t size) {
  (void)state;
  (void)c;
  (void)a;
  (void)ws;
  (void)n;
  (void)stream;
  misbehave("run");
  /* Reached only when run is not the faulty entry: no answer, said as a failure. */
  attn_plugin_write_message(err, size, "this test plugin computes nothing");
  return 1;
}

static void faulty_destroy(void* state) {
  (void)state;
  misbehave("destroy");
}

static int no_workspace(void* state, const attn_config* c, const attn_call* a, uint64_t* bytes,
                        char* err, size_t size) {
  (void)state;
  (void)c;
  (void)a;
  (void)err;
  (void)size;
  *bytes = 0;
  return 0;
}

static int fail(void* state, const attn_config* c, const attn_call* a, void* ws, uint64_t n,
                void* stream, char* err, size_t size) {
  (void)state;
  (void)c;
  (void)a;
  (void)ws;
  (void)n;
  (void)stream;
  attn_plugin_write_message(err, size, "this test plugin runs nothing");
  return 1;
}

__attribute__((visibility("default"))) int attn_tune_plugin_init(uint32_t host_abi_version,
                                                                 attn_plugin_api* api,
                                                                 size_t api_size, char* err,
                                                                 size_t err_size) {
  const char* what = getenv("ATTN_TEST_INIT");
  if (what == NULL) {
    what = "";
  }
  if (strcmp(what, "refuse-early") == 0) {
    /* Refused before ATTN_PLUGIN_CHECK_HOST set any version: the reason is what counts. */
    attn_plugin_write_message(err, err_size, "no licence for this machine");
    return 3;
  }
  ATTN_PLUGIN_CHECK_HOST(host_abi_version, api, api_size, err, err_size);
  if (strcmp(what, "abort") == 0) {
    abort();
  }
  if (strcmp(what, "exit") == 0) {
    exit(0);
  }
  if (strcmp(what, "hang") == 0) {
    for (;;) {
      pause();
    }
  }
  attn_plugin_write_message(version, sizeof version, what);
  api->name = "init-test";
  api->version = version;
  api->device_kind = ATTN_DEVICE_HOST;
  api->families = families;
  api->num_families = 1;
  api->state = NULL;
  api->can_run = refuse;
  api->workspace_size = no_workspace;
  api->run = fail;
  api->destroy = NULL;
  if (strcmp(what, "decl:families") == 0) {
    api->families = (const attn_family_decl*)(uintptr_t)0x10;
    api->num_families = 3;
    return 0;
  }
  if (strcmp(what, "decl:count") == 0) {
    api->num_families = 1 << 30;
    return 0;
  }
  if (strcmp(what, "decl:negative") == 0) {
    api->num_families = -5;
    return 0;
  }
  if (strcmp(what, "decl:params") == 0) {
    static attn_family_decl garbage_params[1] = {{ATTN_FAMILY_DECODE_V1, ATTN_KV_HND, 0, NULL, 4}};
    garbage_params[0].params = (const attn_param_space*)(uintptr_t)0x28;
    api->families = garbage_params;
    return 0;
  }
  if (strcmp(what, "decl:name") == 0) {
    api->name = (const char*)(uintptr_t)0x8;
    return 0;
  }
  if (strcmp(what, "decl:newline") == 0) {
    api->name = "init-test\nattn-tune: a forged line";
    return 0;
  }
  if (strcmp(what, "decl:kv_dtypes") == 0) {
    static const uint32_t masks[1] = {ATTN_KV_DTYPE_BIT(ATTN_KV_DTYPE_FP8_E4M3) | 0x40u};
    api->kv_dtypes = masks;
    return 0;
  }
  if (strcmp(what, "decl:null_families") == 0) {
    api->families = NULL;
    api->num_families = 3;
    return 0;
  }
  if (strcmp(what, "decl:writes_lse") == 0) {
    static const attn_family_decl lse2[1] = {{ATTN_FAMILY_DECODE_V1, ATTN_KV_HND, 2, NULL, 0}};
    api->families = lse2;
    return 0;
  }
  if (strcmp(what, "decl:negative_params") == 0) {
    static const attn_family_decl negative[1] = {{ATTN_FAMILY_DECODE_V1, ATTN_KV_HND, 1, NULL, -1}};
    api->families = negative;
    return 0;
  }
  if (strcmp(what, "fp8-refused") == 0) {
    static const uint32_t e4m3[1] = {ATTN_KV_DTYPE_BIT(ATTN_KV_DTYPE_FP8_E4M3)};
    api->kv_dtypes = e4m3;
    return 0;
  }
  const char* colon = strchr(what, ':');
  if (colon != NULL && (size_t)(colon - what) < sizeof fault_entry) {
    memcpy(fault_entry, what, (size_t)(colon - what));
    fault_entry[colon - what] = '\0';
    strncpy(fault_action, colon + 1, sizeof fault_action - 1);
    api->can_run = faulty_can_run;
    api->workspace_size = faulty_workspace;
    api->run = faulty_run;
    api->destroy = faulty_destroy;
  }
  return 0;
}
