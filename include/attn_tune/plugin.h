/* attn-tune plugin ABI: how an engine hands its own attention kernels to `attn-tune sweep`,
 * `verify`, `replay` and `plugin check`, which then validate, time, isolate and table them as
 * they do their built-in kernels. Plain C (C99 and later, C++, CUDA); docs/plugins.md is the
 * guide.
 *
 * A plugin is a shared library that exports one function, ATTN_PLUGIN_ENTRY_NAME:
 *
 *     int attn_tune_plugin_init(uint32_t host_abi_version, attn_plugin_api* api,
 *                               size_t api_size, char* err, size_t err_size);
 *
 * The host calls it once with the ABI version it speaks and a zeroed table of api_size bytes.
 * The plugin sets api->abi_version to ATTN_PLUGIN_ABI_VERSION as it was compiled, and fills the
 * rest when it speaks the host's version; otherwise it returns nonzero with a message (the
 * ATTN_PLUGIN_CHECK_HOST helper below does this). The host reads abi_version before anything
 * else. A plugin that answers an older version the host still speaks (ATTN_PLUGIN_ABI_OLDEST and
 * later) is called once more, with that version and that version's table size, and runs as that
 * version (ABI 1 plugins: no prepare step, no engine rule); any other version is refused with one
 * line.
 *
 * ABI 2 adds, after ABI 1's fields: the engine rule the kernels replace, the untimed prepare
 * step and its release (attn_plugin_api), and the prepared handle in attn_call. A decode_v2
 * family may now declare no "partition" (the kernel chooses its own splits).
 *
 * ABI 3 adds every sequence's query and key lengths to attn_call, in host memory and in every
 * function that gets a call (can_run included), so that a plugin can refuse what its kernels do
 * not handle by the lengths of the sequences, not only by the longest ones. The function table is
 * ABI 2's.
 *
 * ABI 4 (this header) adds fp8 KV caches (SPEC.md "fp8 KV caches"): the function table's
 * kv_dtypes says which fp8 formats each family reads, and attn_call carries the cache's dtype and
 * its k_scale and v_scale. A family is handed an fp8 cache only when it declares that format, so
 * plugins of ABI 1 to 3 keep loading and are never handed one (their families read "auto" only).
 *
 * Every string the plugin declares and every array it points to must stay valid until
 * api->destroy returns. Errors come back as a nonzero return plus a message written into the
 * caller's buffer (always NUL-terminated, cut to err_size).
 */
#ifndef ATTN_TUNE_PLUGIN_H
#define ATTN_TUNE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_PLUGIN_ABI_VERSION 4u
/* The oldest ABI version a host speaking this header still loads. */
#define ATTN_PLUGIN_ABI_OLDEST 1u
#define ATTN_PLUGIN_ENTRY_NAME "attn_tune_plugin_init"

/* Where the plugin's kernels read and write: host memory (attn-tune passes host pointers and
 * times with a steady clock) or CUDA device memory (device pointers; `run` launches
 * asynchronously on the stream it is given, and attn-tune times it with CUDA events). */
typedef enum attn_device_kind { ATTN_DEVICE_HOST = 1, ATTN_DEVICE_CUDA = 2 } attn_device_kind;

typedef enum attn_family {
  ATTN_FAMILY_DECODE_V1 = 0, /* one pass over the whole context per sequence and head */
  ATTN_FAMILY_DECODE_V2 = 1, /* split-KV: partitions in parallel, then a reduce */
  ATTN_FAMILY_PREFILL = 2    /* varlen flash attention over the paged cache */
} attn_family;

/* KV-cache layouts (SPEC.md "KV-cache layouts"); x = 16 / element bytes.
 *   HND   key, value [num_blocks, num_kv_heads, block_size, head_dim]
 *   NHD   key, value [num_blocks, block_size, num_kv_heads, head_dim]
 *   VLLM  key [num_blocks, num_kv_heads, head_dim / x, block_size, x],
 *         value [num_blocks, num_kv_heads, head_dim, block_size] */
typedef enum attn_kv_layout { ATTN_KV_HND = 0, ATTN_KV_NHD = 1, ATTN_KV_VLLM = 2 } attn_kv_layout;

typedef enum attn_dtype {
  ATTN_DTYPE_F32 = 0,
  ATTN_DTYPE_F16 = 1, /* IEEE half */
  ATTN_DTYPE_BF16 = 2
} attn_dtype;

/* ABI 4: the KV cache's storage dtype, vLLM's kv_cache_dtype. */
typedef enum attn_kv_dtype {
  ATTN_KV_DTYPE_AUTO = 0,     /* the caches have the query's dtype (attn_call::dtype) */
  ATTN_KV_DTYPE_FP8_E4M3 = 1, /* OCP E4M3FN: bias 7, max 448, no infinity, S.1111.111 is NaN */
  ATTN_KV_DTYPE_FP8_E5M2 = 2  /* bias 15, max 57344, IEEE infinities and NaNs */
} attn_kv_dtype;
/* A family's bit for cache dtype d in attn_plugin_api::kv_dtypes. */
#define ATTN_KV_DTYPE_BIT(d) (1u << (unsigned)(d))

/* One tunable parameter and the values the tuner tries. Names are [a-z0-9_]+; values are ints. */
typedef struct attn_param_space {
  const char* name;
  const int* values;
  int num_values;
} attn_param_space;

/* One family the plugin implements. A decode_v2 family that splits the context into fixed
 * partitions declares a parameter named "partition" (keys per split-KV partition, a multiple of
 * block_size for every value can_run accepts): the validator aims its edge lengths at partition
 * boundaries and the threshold table records it. One that chooses its splits itself (a scheduler
 * per batch) declares none; tables then say "the kernel chooses its splits". */
typedef struct attn_family_decl {
  attn_family family;
  attn_kv_layout kv_layout; /* the layout its key_cache and value_cache arrive in */
  int writes_lse;           /* 1: run writes call->lse, which is then checked too */
  const attn_param_space* params;
  int num_params; /* 0 is allowed: a family with one configuration */
} attn_family_decl;

/* A configuration: one value for each declared parameter of the family, in declaration order. */
typedef struct attn_config {
  const char* const* names;
  const int* values;
  int num_params;
} attn_config;

/* One attention call, every SPEC.md field. Pointers are host pointers for ATTN_DEVICE_HOST
 * plugins and device pointers for ATTN_DEVICE_CUDA ones; integer arrays are int32. In can_run
 * and workspace_size the shapes are set but every pointer is NULL. */
typedef struct attn_call {
  attn_family family;
  attn_dtype dtype; /* of query and out, and of the caches unless kv_dtype (ABI 4) says fp8 */
  attn_kv_layout kv_layout;
  int num_heads;
  int num_kv_heads; /* num_heads % num_kv_heads == 0; head h reads kv head h / (H / KVH) */
  int head_dim;
  int block_size;
  float scale;      /* already resolved (1/sqrt(head_dim) unless the call set one) */
  float softcap;    /* 0: off */
  int causal;       /* 0 or 1 */
  int window_left;  /* -1: unbounded */
  int window_right; /* -1: unbounded */
  int batch;
  int num_rows;  /* decode: batch; prefill: total_q = cu_seqlens_q[batch] */
  int max_q_len; /* decode: 1 */
  int max_k_len; /* the longest context (decode) or key length (prefill) */
  int num_blocks;
  int max_blocks_per_seq;
  const void* query;           /* [num_rows, num_heads, head_dim] */
  const void* key_cache;       /* per kv_layout */
  const void* value_cache;     /* per kv_layout */
  const int32_t* block_tables; /* [batch, max_blocks_per_seq]; unused entries may be garbage */
  const int32_t* context_lens; /* decode: [batch]; NULL for prefill */
  const int32_t* cu_seqlens_q; /* prefill: [batch + 1]; NULL for decode */
  const int32_t* cu_seqlens_k; /* prefill: [batch + 1]; NULL for decode */
  void* out;                   /* [num_rows, num_heads, head_dim], dtype */
  float* lse;                  /* [num_rows, num_heads], natural log; always a valid buffer */
  int host_threads;            /* host plugins: threads attn-tune was asked to use (>= 1) */
  /* ABI 2: in run, the handle prepare returned for this prepared run (NULL without prepare, in
   * can_run, workspace_size and prepare itself). ABI 1 plugins never see this field. */
  void* prepared;
  /* ABI 3: every sequence's query and key lengths, [batch] each, in host memory for every kind
   * of plugin, set in can_run, workspace_size, prepare and run alike (decode: q_len 1, k_len the
   * context length; prefill: the differences of cu_seqlens_q and cu_seqlens_k). ABI 1 and 2
   * plugins never see these fields. */
  const int32_t* seq_q_lens;
  const int32_t* seq_k_lens;
  /* ABI 4: the caches' storage dtype. With an fp8 kv_dtype, key_cache and value_cache hold one
   * byte per element (in the vllm layout x = 16) and a cached element stands for
   * float(element) * its KV head's scale: k_scale[h] for keys, v_scale[h] for values, where h is
   * 0 when num_kv_scales is 1 (per-tensor scales) and the KV head when it is num_kv_heads. The
   * scales are fp32 in the plugin's memory (device memory for CUDA plugins, as the caches), NULL
   * in can_run and workspace_size. With ATTN_KV_DTYPE_AUTO the scales are NULL and
   * num_kv_scales 0. A plugin is handed an fp8 cache only for a family whose kv_dtypes has its
   * bit; ABI 1 to 3 plugins never see these fields. */
  attn_kv_dtype kv_dtype;
  int num_kv_scales;
  const float* k_scale;
  const float* v_scale;
} attn_call;

/* A range of the plugin's own memory (host memory for host plugins, device memory for CUDA
 * ones). */
typedef struct attn_memory_range {
  const void* ptr;
  uint64_t bytes;
} attn_memory_range;

/* What prepare hands back: its handle and the memory it laid out, which attn-tune evicts from the
 * caches before every timed repetition as it does its own buffers (a host plugin's ranges are
 * flushed line by line; a CUDA plugin's fall under the L2 flush) and counts in the timing
 * method's line. The ranges array stays valid until release. */
typedef struct attn_prepared {
  void* handle;
  const attn_memory_range* ranges;
  int num_ranges;
} attn_prepared;

typedef struct attn_plugin_api {
  /* Set by every version of this ABI, first: */
  uint32_t abi_version; /* ATTN_PLUGIN_ABI_VERSION the plugin was compiled with */
  uint32_t api_size;    /* sizeof(attn_plugin_api) as the plugin was compiled */

  const char* name;    /* "vllm-paged-attention": names the kernels in tables */
  const char* version; /* the plugin's own version string */
  attn_device_kind device_kind;
  const attn_family_decl* families;
  int num_families;
  void* state; /* passed back to every function below */

  /* 0 when `config` can run `call` (shapes only; pointers are NULL); else nonzero with the
   * reason in `reason` ("head_dim 96 is not supported"). A refusal is "skipped", not a bug. */
  int (*can_run)(void* state, const attn_config* config, const attn_call* call, char* reason,
                 size_t reason_size);
  /* Bytes of scratch one call of `config` on `call` needs (split-KV partials etc.); attn-tune
   * allocates them once, in the plugin's memory, outside the timed region. 0 is fine. */
  int (*workspace_size)(void* state, const attn_config* config, const attn_call* call,
                        uint64_t* bytes, char* err, size_t err_size);
  /* Computes out (and lse when the family writes it). CUDA plugins launch on `stream` (a
   * cudaStream_t) and return without synchronising; host plugins compute before returning
   * (stream is NULL). The workspace holds garbage on entry. */
  int (*run)(void* state, const attn_config* config, const attn_call* call, void* workspace,
             uint64_t workspace_bytes, void* stream, char* err, size_t err_size);
  /* Frees the plugin's state; may be NULL. */
  void (*destroy)(void* state);

  /* ---- ABI 2 ---- */
  /* The engine dispatch rule these kernels replace, which regret, `table show` and the report
   * compare the tuned table against: "vllm-cuda" (use v1 when num_seqs * num_heads > 512 ...),
   * "vllm-cpu", "seed", or NULL for none. */
  const char* engine_rule;
  /* The untimed prepare step; may be NULL. Called once per prepared run, after the problem's
   * buffers are in place and before anything is timed, with the call as run will see it (every
   * pointer set, `prepared` NULL) and the run's workspace: the plugin may lay out its own copy
   * of the cache, tables and scratch here (CUDA plugins on `stream`, synchronised before
   * returning). It fills *prepared; attn-tune passes prepared->handle to every run as
   * call->prepared. Nonzero with a message: the configuration's error. */
  int (*prepare)(void* state, const attn_config* config, const attn_call* call, void* workspace,
                 uint64_t workspace_bytes, void* stream, attn_prepared* prepared, char* err,
                 size_t err_size);
  /* Frees what prepare made, once, when the run is over; may be NULL. */
  void (*release)(void* state, const attn_config* config, attn_prepared* prepared);

  /* ---- ABI 4 ---- */
  /* The fp8 caches each family reads: NULL (none reads fp8) or num_families masks, in the order
   * of `families`, each the ATTN_KV_DTYPE_BIT of every fp8 format the family reads
   * (ATTN_KV_DTYPE_BIT(ATTN_KV_DTYPE_FP8_E4M3) | ATTN_KV_DTYPE_BIT(ATTN_KV_DTYPE_FP8_E5M2) for
   * both). Every family reads caches of the query's dtype; no other bit may be set. */
  const uint32_t* kv_dtypes;
} attn_plugin_api;

/* The size of an ABI 1 function table: the host offers it to plugins that answer version 1. */
#define ATTN_PLUGIN_API_V1_SIZE offsetof(attn_plugin_api, engine_rule)
/* The size of an ABI 2 and ABI 3 function table. */
#define ATTN_PLUGIN_API_V3_SIZE offsetof(attn_plugin_api, kv_dtypes)

typedef int (*attn_plugin_init_fn)(uint32_t host_abi_version, attn_plugin_api* api, size_t api_size,
                                   char* err, size_t err_size);

/* Inside an init function: records the version this plugin speaks, then refuses a host that
 * speaks another one (or offers a smaller table), with the message the host prints. The
 * arguments are the init function's five, whatever the plugin names them. (Until 2026-12-06 the
 * third parameter was named api_size, as the table's member is, so the macro compiled only where
 * the caller's variable had that name.) */
#define ATTN_PLUGIN_CHECK_HOST(attn_host_version_, attn_api_, attn_api_bytes_, attn_err_,          \
                               attn_err_size_)                                                     \
  do {                                                                                             \
    if ((attn_api_) != NULL && (attn_api_bytes_) >= 2 * sizeof(uint32_t)) {                        \
      (attn_api_)->abi_version = ATTN_PLUGIN_ABI_VERSION;                                          \
      (attn_api_)->api_size = (uint32_t)sizeof(attn_plugin_api);                                   \
    }                                                                                              \
    if ((attn_host_version_) != ATTN_PLUGIN_ABI_VERSION || (attn_api_) == NULL ||                  \
        (attn_api_bytes_) < sizeof(attn_plugin_api)) {                                             \
      attn_plugin_write_message((attn_err_), (attn_err_size_), "plugin ABI mismatch");             \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

/* Copies `msg` into a caller's message buffer, cut to size and NUL-terminated. */
static inline void attn_plugin_write_message(char* buf, size_t size, const char* msg) {
  size_t i = 0;
  if (buf == NULL || size == 0) {
    return;
  }
  for (; msg != NULL && msg[i] != '\0' && i + 1 < size; ++i) {
    buf[i] = msg[i];
  }
  buf[i] = '\0';
}

#ifdef __cplusplus
}
#endif

#endif /* ATTN_TUNE_PLUGIN_H */
