#if defined(SPLIT_SPIN)
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c99 */
#endif
/* A test-only host plugin: scalar paged decode in the HND layout, decode_v1 (one pass per
 * sequence and head) and decode_v2 (split-KV: per-partition max, sum and normalised partial
 * output in the workspace, then a reduce), fp32/fp16/bf16, writing lse. Built once correct and
 * once per planted engine bug (one SPLIT_BUG_* definition per library), so that the tests can
 * check that `verify` and `plugin check` catch each bug. Written from plugin.h, docs/plugins.md
 * and SPEC.md alone; no threads (call->host_threads is ignored).
 *
 * Data: q, out [batch, num_heads, head_dim]; caches [num_blocks, num_kv_heads, block_size,
 * head_dim]; lse [batch, num_heads] fp32. Inputs are converted to double on load, scores and
 * sums accumulate in double, v2 keeps its partials in fp32 (as engines do), and out is rounded to
 * the dtype to nearest even.
 *
 * Tunables: decode_v1 none; decode_v2 `partition` (keys per partition) 384 or 768.
 * can_run accepts block_size 16 or 48 and head_dim 8..256 in steps of 8.
 *
 * SPLIT_OWN_SPLITS (a correct variant, not a bug): decode_v2 declares no parameter and chooses
 * its splits per sequence, as a scheduler would: ceil(len / 256) splits, at most 8, each a whole
 * number of blocks (so boundaries move with the length). It names vLLM CPU's rule as the one it
 * replaces (engine_rule "vllm-cpu"), whose scheduler also chooses the splits.
 *
 * Planted bugs (none defined: the correct plugin). "Length" bugs make the kernel act as if the
 * sequence had a wrong length: it reads that many keys and its masks put the query there.
 *   SPLIT_BUG_DROP_LAST_KEY    v2: every full partition stops one key short (drops key k*P-1).
 *   SPLIT_BUG_OVERLAP          v2: every partition but the last reads one key past its end
 *                              (key k*P is counted twice).
 *   SPLIT_BUG_LAST_PARTITION   v2: when k_len is a multiple of P and k_len > P, the partition
 *                              count is one short and the last partition is skipped.
 *   SPLIT_BUG_MAX_NOT_RESCALED v2: the reduce weights partial t by l_t alone, without
 *                              exp(m_t - M); lse = M + log(sum l_t).
 *   SPLIT_BUG_LSE_BASE2        v2: the reduce combines the partitions' natural-log lse_t =
 *                              m_t + ln(l_t) with powers of 2, w_t = 2^(lse_t - L) where
 *                              L = max lse_t, and writes lse = L + log2(sum w_t).
 *   SPLIT_BUG_GQA_MOD          both: query head h reads kv head h % num_kv_heads.
 *   SPLIT_BUG_FULL_LAST_BLOCK  both: the last block's valid length is k_len % block_size, so a
 *                              full last block counts as empty (length k_len - block_size).
 *   SPLIT_BUG_ONE_PAST         both: length k_len + 1 (clamped to max_blocks_per_seq *
 *                              block_size); an out-of-range block-table entry reads block 0.
 *   SPLIT_BUG_STALE_BLOCK      both: length ceil(k_len / block_size) * block_size (the stale
 *                              slots of the last block are read).
 *   SPLIT_BUG_LSE_LOG2         both: out is right, lse is written in base 2 (natural / ln 2).
 *   SPLIT_BUG_ZERO_WEIGHT_TAIL both: the values of the last block's slots past the length are
 *                              added with weight 0 (acc += 0 * v), harmless until they hold NaN
 *                              (vllm-project/vllm issue 641).
 *   SPLIT_BUG_SECOND_CONFIG    v2 with partition 768 only: SPLIT_BUG_DROP_LAST_KEY's bug.
 *   SPLIT_BUG_WRITES_QUERY     both: out and lse are right, but each query row is left halved in
 *                              the caller's buffer after it is read (a scale folded in place).
 *
 * fp8 caches (plugin ABI 4, SPEC.md "fp8 KV caches"): the correct build (no definition) and the
 * SPLIT_FP8_* builds declare that both families read fp8_e4m3 and fp8_e5m2, decoding each byte
 * by its fields and multiplying by its KV head's scale; the other builds read 16- and 32-bit
 * caches only. Each SPLIT_FP8_* build plants one mistake engines make with fp8 caches:
 *   SPLIT_FP8_SCALE_IGNORED    both scales are taken as 1.
 *   SPLIT_FP8_SCALE_TWICE      each element is multiplied by its scale twice.
 *   SPLIT_FP8_E4M3_AS_E5M2     an fp8_e4m3 cache's bytes are decoded as fp8_e5m2.
 *   SPLIT_FP8_SCALES_SWAPPED   keys are scaled by v_scale and values by k_scale.
 *   SPLIT_FP8_SIGN_IGNORED     each byte's sign bit is dropped: every value read as its magnitude.
 *   SPLIT_FP8_E4M3_AS_FNUZ     an fp8_e4m3 cache's bytes are decoded as e4m3fnuz (bias 8,
 *                              0x80 NaN).
 *   SPLIT_FP8_SCALE_PER_HEAD   the scales are read at the KV head's index, per tensor ones too.
 *   SPLIT_FP8_SCALES_CACHED    the scales are copied once per call shape and buffers (keyed by
 *                              their addresses, the caches', the lengths), so scales an engine
 *                              rewrites in the same buffers are not seen.
 *
 * Builds of the correct kernels that exercise the ABI rather than plant a bug:
 *   SPLIT_ABI1     built against plugin ABI 1's header (tests/plugins/abi1): an old plugin,
 *                  which the host must still load and run unchanged.
 *   SPLIT_ABI3     built against ABI 3's header (tests/plugins/abi3): a plugin from before fp8
 *                  caches, which the host loads and never hands one.
 *   SPLIT_SPIN     a kernel set whose costs are planted: each run computes, then waits (spinning
 *                  on the monotonic clock) until its planted time since the call began has
 *                  passed: decode_v1 500 ns per key of the batch, decode_v2 300 us plus 250 ns
 *                  per key. v1 wins below 1200 keys and v2 above: the crossover a sweep must find
 *                  (at batch 1, a context of 1200 tokens).
 *   SPLIT_PREPARE  ABI 2's prepare step, built against ABI 2's header (tests/plugins/abi2):
 *                  prepare copies both caches into the plugin's own memory (declared as its
 *                  ranges), run reads only that copy and fails when the host hands it no
 *                  prepared handle, release frees it; names engine rule "seed".
 * Every build against ABI 3's header or later checks the sequences' lengths the host passes:
 * can_run refuses a call without them, run fails where they disagree with context_lens.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#if defined(SPLIT_SPIN)
#include <time.h>
#endif

#if defined(SPLIT_ABI1)
#include "tests/plugins/abi1/attn_tune/plugin.h"
#elif defined(SPLIT_PREPARE)
#include "tests/plugins/abi2/attn_tune/plugin.h"
#elif defined(SPLIT_ABI3)
#include "tests/plugins/abi3/attn_tune/plugin.h"
#else
#include "include/attn_tune/plugin.h"
#endif
#include <stdlib.h>

#if (defined(SPLIT_BUG_DROP_LAST_KEY) + defined(SPLIT_BUG_OVERLAP) +                               \
     defined(SPLIT_BUG_LAST_PARTITION) + defined(SPLIT_BUG_MAX_NOT_RESCALED) +                     \
     defined(SPLIT_BUG_LSE_BASE2) + defined(SPLIT_BUG_GQA_MOD) +                                   \
     defined(SPLIT_BUG_FULL_LAST_BLOCK) + defined(SPLIT_BUG_ONE_PAST) +                            \
     defined(SPLIT_BUG_STALE_BLOCK) + defined(SPLIT_BUG_LSE_LOG2) +                                \
     defined(SPLIT_BUG_SECOND_CONFIG) + defined(SPLIT_OWN_SPLITS) +                                \
     defined(SPLIT_BUG_ZERO_WEIGHT_TAIL) + defined(SPLIT_FP8_SCALE_IGNORED) +                      \
     defined(SPLIT_BUG_WRITES_QUERY) + defined(SPLIT_FP8_SCALE_TWICE) +                            \
     defined(SPLIT_FP8_E4M3_AS_E5M2) + defined(SPLIT_FP8_SCALES_SWAPPED) +                         \
     defined(SPLIT_FP8_SIGN_IGNORED) + defined(SPLIT_FP8_E4M3_AS_FNUZ) +                           \
     defined(SPLIT_FP8_SCALE_PER_HEAD) + defined(SPLIT_FP8_SCALES_CACHED)) > 1
#error "define at most one SPLIT_BUG_*, SPLIT_FP8_* or SPLIT_OWN_SPLITS"
#endif

/* The builds that declare fp8 caches: the correct one and the fp8 mistakes. */
#if ATTN_PLUGIN_ABI_VERSION >= 4 &&                                                                \
    (defined(SPLIT_FP8_SCALE_IGNORED) || defined(SPLIT_FP8_SCALE_TWICE) ||                         \
     defined(SPLIT_FP8_E4M3_AS_E5M2) || defined(SPLIT_FP8_SCALES_SWAPPED) ||                       \
     defined(SPLIT_FP8_SIGN_IGNORED) || defined(SPLIT_FP8_E4M3_AS_FNUZ) ||                         \
     defined(SPLIT_FP8_SCALE_PER_HEAD) || defined(SPLIT_FP8_SCALES_CACHED) ||                      \
     !(defined(SPLIT_BUG_DROP_LAST_KEY) || defined(SPLIT_BUG_OVERLAP) ||                           \
       defined(SPLIT_BUG_LAST_PARTITION) || defined(SPLIT_BUG_MAX_NOT_RESCALED) ||                 \
       defined(SPLIT_BUG_LSE_BASE2) || defined(SPLIT_BUG_GQA_MOD) ||                               \
       defined(SPLIT_BUG_FULL_LAST_BLOCK) || defined(SPLIT_BUG_ONE_PAST) ||                        \
       defined(SPLIT_BUG_STALE_BLOCK) || defined(SPLIT_BUG_LSE_LOG2) ||                            \
       defined(SPLIT_BUG_SECOND_CONFIG) || defined(SPLIT_BUG_ZERO_WEIGHT_TAIL) ||                  \
       defined(SPLIT_BUG_WRITES_QUERY) || defined(SPLIT_OWN_SPLITS)))
#define SPLIT_READS_FP8 1
#endif

#if defined(SPLIT_BUG_DROP_LAST_KEY)
#define SPLIT_NAME "split-kv-drop-last-key"
#elif defined(SPLIT_BUG_OVERLAP)
#define SPLIT_NAME "split-kv-overlap"
#elif defined(SPLIT_BUG_LAST_PARTITION)
#define SPLIT_NAME "split-kv-last-partition"
#elif defined(SPLIT_BUG_MAX_NOT_RESCALED)
#define SPLIT_NAME "split-kv-max-not-rescaled"
#elif defined(SPLIT_BUG_LSE_BASE2)
#define SPLIT_NAME "split-kv-lse-base2"
#elif defined(SPLIT_BUG_GQA_MOD)
#define SPLIT_NAME "split-kv-gqa-mod"
#elif defined(SPLIT_BUG_FULL_LAST_BLOCK)
#define SPLIT_NAME "split-kv-full-last-block"
#elif defined(SPLIT_BUG_ONE_PAST)
#define SPLIT_NAME "split-kv-one-past"
#elif defined(SPLIT_BUG_STALE_BLOCK)
#define SPLIT_NAME "split-kv-stale-block"
#elif defined(SPLIT_BUG_LSE_LOG2)
#define SPLIT_NAME "split-kv-lse-log2"
#elif defined(SPLIT_BUG_SECOND_CONFIG)
#define SPLIT_NAME "split-kv-second-config"
#elif defined(SPLIT_BUG_WRITES_QUERY)
#define SPLIT_NAME "split-kv-writes-query"
#elif defined(SPLIT_BUG_ZERO_WEIGHT_TAIL)
#define SPLIT_NAME "split-kv-zero-weight-tail"
#elif defined(SPLIT_FP8_SCALE_IGNORED)
#define SPLIT_NAME "split-kv-fp8-scale-ignored"
#elif defined(SPLIT_FP8_SCALE_TWICE)
#define SPLIT_NAME "split-kv-fp8-scale-twice"
#elif defined(SPLIT_FP8_E4M3_AS_E5M2)
#define SPLIT_NAME "split-kv-fp8-e4m3-as-e5m2"
#elif defined(SPLIT_FP8_SCALES_SWAPPED)
#define SPLIT_NAME "split-kv-fp8-scales-swapped"
#elif defined(SPLIT_FP8_SIGN_IGNORED)
#define SPLIT_NAME "split-kv-fp8-sign-ignored"
#elif defined(SPLIT_FP8_E4M3_AS_FNUZ)
#define SPLIT_NAME "split-kv-fp8-e4m3-as-fnuz"
#elif defined(SPLIT_FP8_SCALE_PER_HEAD)
#define SPLIT_NAME "split-kv-fp8-scale-per-head"
#elif defined(SPLIT_FP8_SCALES_CACHED)
#define SPLIT_NAME "split-kv-fp8-scales-cached"
#elif defined(SPLIT_ABI3)
#define SPLIT_NAME "split-kv-abi3"
#elif defined(SPLIT_SPIN)
#define SPLIT_NAME "split-kv-spin"
#elif defined(SPLIT_ABI1)
#define SPLIT_NAME "split-kv-abi1"
#elif defined(SPLIT_PREPARE)
#define SPLIT_NAME "split-kv-prepare"
#elif defined(SPLIT_OWN_SPLITS)
#define SPLIT_NAME "split-kv-own-splits"
#else
#define SPLIT_NAME "split-kv-ok"
#endif

#define MAX_HEAD_DIM 256

#if defined(SPLIT_OWN_SPLITS)
/* Splits of about kKeysPerSplit keys, at most kMaxSplits per (sequence, head). */
enum { kKeysPerSplit = 256, kMaxSplits = 8 };
static const attn_family_decl kFamilies[] = {
    {ATTN_FAMILY_DECODE_V1, ATTN_KV_HND, /*writes_lse=*/1, NULL, 0},
    {ATTN_FAMILY_DECODE_V2, ATTN_KV_HND, /*writes_lse=*/1, NULL, 0}};
#define SPLIT_ENGINE_RULE "vllm-cpu"
#else
static const int kPartitions[] = {384, 768};
static const attn_param_space kV2Params[] = {{"partition", kPartitions, 2}};
static const attn_family_decl kFamilies[] = {
    {ATTN_FAMILY_DECODE_V1, ATTN_KV_HND, /*writes_lse=*/1, NULL, 0},
    {ATTN_FAMILY_DECODE_V2, ATTN_KV_HND, /*writes_lse=*/1, kV2Params, 1}};
#define SPLIT_ENGINE_RULE NULL
#endif

/* ---- fp16 and bf16, by hand ---------------------------------------------------------------- */

static uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static float half_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) { /* zero or subnormal: mantissa * 2^-24, exact in float */
    const float v = (float)mantissa * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exponent == 31) { /* infinity or NaN */
    return bits_float(sign | 0x7f800000u | (mantissa << 13));
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

/* Round to nearest even, overflow to infinity, NaN stays NaN. */
static uint16_t float_to_half(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) {
    return (uint16_t)(sign | 0x7e00u);
  }
  if (a >= 0x47800000u) { /* |f| >= 65536 (or infinity) */
    return (uint16_t)(sign | 0x7c00u);
  }
  if (a < 0x38800000u) { /* below 2^-14: a half subnormal (or zero) */
    /* Adding 0.5 shifts the value's bits down to the half-subnormal grid (2^-24 steps),
     * rounding to nearest even in the float addition. */
    const float magic = 0.5f;
    const uint32_t r = float_bits(bits_float(a) + magic) - float_bits(magic);
    return (uint16_t)(sign | r);
  }
  /* Normal: rebias the exponent, then round the 13 dropped bits to nearest even; a carry out of
   * the mantissa bumps the exponent (up to 0x7c00, infinity, for values from 65520). */
  a += ((uint32_t)(15 - 127) << 23) + 0xfffu + ((a >> 13) & 1u);
  return (uint16_t)(sign | (a >> 13));
}

static float bf16_to_float(uint16_t b) { return bits_float((uint32_t)b << 16); }

static uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  }
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Loads n elements of a tensor of `dtype`, starting at element `index`, as doubles. */
static void load_row(attn_dtype dtype, const void* base, size_t index, int n, double* dst) {
  int i;
  if (dtype == ATTN_DTYPE_F32) {
    const float* p = (const float*)base + index;
    for (i = 0; i < n; ++i) {
      dst[i] = p[i];
    }
  } else if (dtype == ATTN_DTYPE_F16) {
    const uint16_t* p = (const uint16_t*)base + index;
    for (i = 0; i < n; ++i) {
      dst[i] = half_to_float(p[i]);
    }
  } else {
    const uint16_t* p = (const uint16_t*)base + index;
    for (i = 0; i < n; ++i) {
      dst[i] = bf16_to_float(p[i]);
    }
  }
}

/* Stores n values to a tensor of `dtype` at element `index`, rounded to nearest even. */
static void store_row(attn_dtype dtype, void* base, size_t index, int n, const double* src) {
  int i;
  if (dtype == ATTN_DTYPE_F32) {
    float* p = (float*)base + index;
    for (i = 0; i < n; ++i) {
      p[i] = (float)src[i];
    }
  } else if (dtype == ATTN_DTYPE_F16) {
    uint16_t* p = (uint16_t*)base + index;
    for (i = 0; i < n; ++i) {
      p[i] = float_to_half((float)src[i]);
    }
  } else {
    uint16_t* p = (uint16_t*)base + index;
    for (i = 0; i < n; ++i) {
      p[i] = float_to_bf16((float)src[i]);
    }
  }
}

#ifdef SPLIT_READS_FP8
/* Both families read both fp8 formats. */
static const uint32_t kKvDtypes[] = {
    ATTN_KV_DTYPE_BIT(ATTN_KV_DTYPE_FP8_E4M3) | ATTN_KV_DTYPE_BIT(ATTN_KV_DTYPE_FP8_E5M2),
    ATTN_KV_DTYPE_BIT(ATTN_KV_DTYPE_FP8_E4M3) | ATTN_KV_DTYPE_BIT(ATTN_KV_DTYPE_FP8_E5M2)};

/* One fp8 byte's value, from its fields: E4M3FN (bias 7, no infinity, S.1111.111 NaN) or E5M2
 * (bias 15, IEEE infinities and NaNs). */
static double fp8_value(int e4m3, uint8_t byte) {
  const double sign = (byte & 0x80u) ? -1.0 : 1.0;
  const int mbits = e4m3 ? 3 : 2;
  const int bias = e4m3 ? 7 : 15;
  const int exponent = (byte & 0x7fu) >> mbits;
  const int mantissa = byte & ((1 << mbits) - 1);
  const int top = e4m3 ? 15 : 31;
  if (e4m3 && exponent == top && mantissa == (1 << mbits) - 1) {
    return NAN;
  }
  if (!e4m3 && exponent == top) {
    return mantissa == 0 ? sign * INFINITY : NAN;
  }
  if (exponent == 0) { /* subnormal: mantissa * 2^(1 - bias - mbits) */
    return sign * ldexp((double)mantissa, 1 - bias - mbits);
  }
  return sign * ldexp((double)((1 << mbits) + mantissa), exponent - bias - mbits);
}

#if defined(SPLIT_FP8_E4M3_AS_FNUZ)
/* One byte's value as AMD's e4m3fnuz: bias 8, no negative zero (0x80 is the one NaN), no
 * infinity. */
static double fnuz_value(uint8_t byte) {
  const int exponent = (byte & 0x7fu) >> 3;
  const int mantissa = byte & 7;
  double v;
  if (byte == 0x80u) {
    return NAN;
  }
  v = exponent == 0 ? ldexp((double)mantissa, 1 - 8 - 3)
                    : ldexp((double)(8 + mantissa), exponent - 8 - 3);
  return (byte & 0x80u) ? -v : v;
}
#endif

#if defined(SPLIT_FP8_SCALES_CACHED)
/* The scales as first read for a call of these buffers and lengths (no threads: no lock). */
static struct {
  const void *k_scale, *key_cache, *value_cache;
  long long lens;
  float k[1024], v[1024];
} g_scales;

static double cached_scale(const attn_call* a, int value, int at) {
  long long lens = 0;
  int b;
  double s;
  for (b = 0; b < a->batch; ++b) {
    lens = lens * 31 + a->seq_k_lens[b];
  }
  if (g_scales.k_scale != (const void*)a->k_scale || g_scales.key_cache != a->key_cache ||
      g_scales.value_cache != a->value_cache || g_scales.lens != lens) {
    int i;
    for (i = 0; i < a->num_kv_scales && i < 1024; ++i) {
      g_scales.k[i] = a->k_scale[i];
      g_scales.v[i] = a->v_scale[i];
    }
    g_scales.k_scale = a->k_scale;
    g_scales.key_cache = a->key_cache;
    g_scales.value_cache = a->value_cache;
    g_scales.lens = lens;
  }
  s = value ? g_scales.v[at] : g_scales.k[at];
  return s;
}
#endif

/* KV head kvh's dequantisation scale of the keys (value == 0) or the values. */
static double fp8_scale(const attn_call* a, int value, int kvh) {
#if defined(SPLIT_FP8_SCALE_PER_HEAD)
  const int at = kvh;
#else
  const int at = a->num_kv_scales == 1 ? 0 : kvh;
#endif
#if defined(SPLIT_FP8_SCALES_SWAPPED)
  value = !value;
#endif
#if defined(SPLIT_FP8_SCALE_IGNORED)
  (void)at;
  (void)value;
  return 1.0;
#elif defined(SPLIT_FP8_SCALE_TWICE)
  {
    const double s = value ? a->v_scale[at] : a->k_scale[at];
    return s * s;
  }
#elif defined(SPLIT_FP8_SCALES_CACHED)
  return cached_scale(a, value, at);
#else
  return value ? a->v_scale[at] : a->k_scale[at];
#endif
}
#endif

/* Loads n elements of KV head kvh's keys (value == 0) or values at element `index` of the cache,
 * dequantised where the cache is fp8, as doubles. */
static void load_kv(const attn_call* a, int value, int kvh, size_t index, int n, double* dst) {
  const void* cache = value ? a->value_cache : a->key_cache;
#ifdef SPLIT_READS_FP8
  if (a->kv_dtype != ATTN_KV_DTYPE_AUTO) {
    const uint8_t* p = (const uint8_t*)cache + index;
    const double s = fp8_scale(a, value, kvh);
#if defined(SPLIT_FP8_E4M3_AS_E5M2)
    const int e4m3 = 0;
#else
    const int e4m3 = a->kv_dtype == ATTN_KV_DTYPE_FP8_E4M3;
#endif
    int i;
    for (i = 0; i < n; ++i) {
#if defined(SPLIT_FP8_SIGN_IGNORED)
      dst[i] = fp8_value(e4m3, (uint8_t)(p[i] & 0x7f)) * s;
#elif defined(SPLIT_FP8_E4M3_AS_FNUZ)
      dst[i] = (e4m3 ? fnuz_value(p[i]) : fp8_value(0, p[i])) * s;
#else
      dst[i] = fp8_value(e4m3, p[i]) * s;
#endif
    }
    return;
  }
#else
  (void)kvh;
#endif
  load_row(a->dtype, cache, index, n, dst);
}

/* ---- what the kernel reads ------------------------------------------------------------------ */

/* The sequence length the kernel works with (the true one unless a length bug is planted). */
static int kernel_len(const attn_call* a, int k_len) {
#if defined(SPLIT_BUG_FULL_LAST_BLOCK)
  if (k_len > 0) {
    const int blocks = (k_len + a->block_size - 1) / a->block_size;
    return (blocks - 1) * a->block_size + k_len % a->block_size;
  }
  return k_len;
#elif defined(SPLIT_BUG_ONE_PAST)
  const int limit = a->max_blocks_per_seq * a->block_size;
  return k_len + 1 < limit ? k_len + 1 : limit;
#elif defined(SPLIT_BUG_STALE_BLOCK)
  return (k_len + a->block_size - 1) / a->block_size * a->block_size;
#else
  (void)a;
  return k_len;
#endif
}

static int kv_head_of(const attn_call* a, int h) {
#if defined(SPLIT_BUG_GQA_MOD)
  return h % a->num_kv_heads;
#else
  return h / (a->num_heads / a->num_kv_heads);
#endif
}

/* SPEC.md's visible keys of the decode row of a sequence of `len` keys (query position len-1),
 * as the half-open range [*lo, *hi); empty when *lo >= *hi. */
static void visible_keys(const attn_call* a, int len, int* lo, int* hi) {
  const long long p = (long long)len - 1;
  long long first = 0, last = (long long)len - 1;
  if (a->causal && last > p) {
    last = p;
  }
  if (a->window_left >= 0 && first < p - a->window_left) {
    first = p - a->window_left;
  }
  if (a->window_right >= 0 && last > p + a->window_right) {
    last = p + a->window_right;
  }
  *lo = (int)first;
  *hi = last < first ? (int)first : (int)(last + 1);
}

/* Element index of key (or value) position j of sequence b, kv head kvh, in the HND cache. */
static size_t cache_index(const attn_call* a, int b, int kvh, int j) {
  long long block =
      a->block_tables[(size_t)b * (size_t)a->max_blocks_per_seq + (size_t)(j / a->block_size)];
#if defined(SPLIT_BUG_ONE_PAST)
  if (block < 0 || block >= a->num_blocks) { /* the extra key's block may be unused garbage */
    block = 0;
  }
#endif
  return (((size_t)block * (size_t)a->num_kv_heads + (size_t)kvh) * (size_t)a->block_size +
          (size_t)(j % a->block_size)) *
         (size_t)a->head_dim;
}

/* One query row against the keys [lo, hi) that are also in [vis_lo, vis_hi): online softmax.
 * Leaves the max score in *m (-inf when no key), *l = sum exp(s - m) and acc = sum exp(s - m) v. */
static void attend(const attn_call* a, int b, int kvh, const double* q, int lo, int hi, int vis_lo,
                   int vis_hi, double* m, double* l, double* acc) {
  const int D = a->head_dim;
  double k[MAX_HEAD_DIM], v[MAX_HEAD_DIM];
  int j, d;
  *m = -INFINITY;
  *l = 0.0;
  for (d = 0; d < D; ++d) {
    acc[d] = 0.0;
  }
  if (lo < vis_lo) {
    lo = vis_lo;
  }
  if (hi > vis_hi) {
    hi = vis_hi;
  }
  for (j = lo; j < hi; ++j) {
    const size_t at = cache_index(a, b, kvh, j);
    double s = 0.0, w;
    load_kv(a, 0, kvh, at, D, k);
    for (d = 0; d < D; ++d) {
      s += q[d] * k[d];
    }
    s *= a->scale;
    if (a->softcap > 0.0f) {
      s = a->softcap * tanh(s / a->softcap);
    }
    if (s > *m) { /* a new max: rescale what was summed against the old one */
      const double r = exp(*m - s);
      *l *= r;
      for (d = 0; d < D; ++d) {
        acc[d] *= r;
      }
      *m = s;
    }
    w = exp(s - *m);
    *l += w;
    load_kv(a, 1, kvh, at, D, v);
    for (d = 0; d < D; ++d) {
      acc[d] += w * v[d];
    }
  }
#if defined(SPLIT_BUG_ZERO_WEIGHT_TAIL)
  /* The rest of the block the last key read sits in, as a kernel that loads whole blocks and
   * masks by weight does: its slots past the visible keys get weight 0. */
  for (j = hi; hi > lo && j % a->block_size != 0; ++j) {
    load_kv(a, 1, kvh, cache_index(a, b, kvh, j), D, v);
    for (d = 0; d < D; ++d) {
      acc[d] += 0.0 * v[d];
    }
  }
#endif
}

/* Writes out = acc / l (0 when l = 0) and lse (-inf when l = 0). */
static void write_row(const attn_call* a, size_t row, double l, double* acc, double lse) {
  const int D = a->head_dim;
  int d;
  for (d = 0; d < D; ++d) {
    acc[d] = l > 0.0 ? acc[d] / l : 0.0;
  }
  store_row(a->dtype, a->out, row * (size_t)D, D, acc);
#if defined(SPLIT_BUG_LSE_LOG2)
  lse /= 0.693147180559945309417232121458176568; /* ln 2 */
#endif
  a->lse[row] = l > 0.0 ? (float)lse : -INFINITY;
}

static void load_query(const attn_call* a, size_t row, double* q) {
  load_row(a->dtype, a->query, row * (size_t)a->head_dim, a->head_dim, q);
#if defined(SPLIT_BUG_WRITES_QUERY)
  {
    double half[MAX_HEAD_DIM];
    int d;
    for (d = 0; d < a->head_dim; ++d) {
      half[d] = 0.5 * q[d];
    }
    store_row(a->dtype, (void*)(uintptr_t)a->query, row * (size_t)a->head_dim, a->head_dim, half);
  }
#endif
}

/* ---- decode_v1 ------------------------------------------------------------------------------ */

static void run_v1(const attn_call* a) {
  double q[MAX_HEAD_DIM], acc[MAX_HEAD_DIM];
  int b, h;
  for (b = 0; b < a->batch; ++b) {
    const int len = kernel_len(a, a->context_lens[b]);
    int vis_lo, vis_hi;
    visible_keys(a, len, &vis_lo, &vis_hi);
    for (h = 0; h < a->num_heads; ++h) {
      const size_t row = (size_t)b * (size_t)a->num_heads + (size_t)h;
      double m, l;
      load_query(a, row, q);
      attend(a, b, kv_head_of(a, h), q, 0, len, vis_lo, vis_hi, &m, &l, acc);
      write_row(a, row, l, acc, m + log(l));
    }
  }
}

/* ---- decode_v2 ------------------------------------------------------------------------------ */

static int config_value(const attn_config* c, const char* name, int fallback) {
  int i;
  for (i = 0; i < c->num_params; ++i) {
    if (strcmp(c->names[i], name) == 0) {
      return c->values[i];
    }
  }
  return fallback;
}

/* The keys per partition of a sequence of `len` keys: the configuration's, or (SPLIT_OWN_SPLITS)
 * the kernel's own choice, ceil(len / kKeysPerSplit) splits of whole blocks, at most kMaxSplits:
 * a partition of at least ceil(len / splits) keys makes at most `splits` partitions. */
static int partition_for(const attn_call* a, const attn_config* config, int len) {
#if defined(SPLIT_OWN_SPLITS)
  int splits = (len + kKeysPerSplit - 1) / kKeysPerSplit;
  int per;
  (void)config;
  (void)config_value; /* the configuration has no parameter here */
  if (splits < 1) {
    splits = 1;
  }
  if (splits > kMaxSplits) {
    splits = kMaxSplits;
  }
  per = (len + splits - 1) / splits;
  per = (per + a->block_size - 1) / a->block_size * a->block_size;
  return per > 0 ? per : a->block_size;
#else
  (void)a;
  (void)len;
  return config_value(config, "partition", 0);
#endif
}

/* Partitions the workspace has room for per (sequence, head): enough for max_k_len plus the
 * block a length bug may add (kMaxSplits where the kernel chooses its splits). */
static int max_partitions(const attn_call* a, const attn_config* config) {
#if defined(SPLIT_OWN_SPLITS)
  (void)a;
  (void)config;
  return kMaxSplits;
#else
  const int partition = config_value(config, "partition", 1);
  return (a->max_k_len + a->block_size + partition - 1) / partition;
#endif
}

/* One partial: m, l, then the normalised output o[head_dim], all fp32. */
static size_t partial_floats(const attn_call* a) { return (size_t)a->head_dim + 2; }

static uint64_t v2_workspace_bytes(const attn_call* a, const attn_config* config) {
  return (uint64_t)a->batch * (uint64_t)a->num_heads * (uint64_t)max_partitions(a, config) *
         (uint64_t)partial_floats(a) * sizeof(float);
}

static int num_partitions(int len, int partition) {
  int n = (len + partition - 1) / partition;
#if defined(SPLIT_BUG_LAST_PARTITION)
  if (len % partition == 0 && len > partition) {
    n -= 1;
  }
#endif
  return n;
}

static int run_v2(const attn_call* a, const attn_config* config, float* ws, uint64_t ws_bytes,
                  char* err, size_t err_size) {
  const int D = a->head_dim;
  const int max_parts = max_partitions(a, config);
  const size_t stride = partial_floats(a);
  double q[MAX_HEAD_DIM], acc[MAX_HEAD_DIM];
  int b, h, t, d;
#if defined(SPLIT_BUG_DROP_LAST_KEY)
  const int drop_last_key = 1;
#elif defined(SPLIT_BUG_SECOND_CONFIG)
  const int drop_last_key = config_value(config, "partition", 0) == kPartitions[1];
#else
  const int drop_last_key = 0;
#endif
  if (ws_bytes < v2_workspace_bytes(a, config) ||
      (ws == NULL && v2_workspace_bytes(a, config) > 0)) {
    attn_plugin_write_message(err, err_size, "the workspace is smaller than workspace_size said");
    return 1;
  }
  /* Pass 1, the "partition kernel": one partial per (sequence, head, partition). */
  for (b = 0; b < a->batch; ++b) {
    const int len = kernel_len(a, a->context_lens[b]);
    const int P = partition_for(a, config, len);
    const int n = num_partitions(len, P);
    int vis_lo, vis_hi;
    if (n > max_parts) {
      char msg[128];
      snprintf(msg, sizeof msg, "context_lens[%d] = %d is longer than max_k_len %d", b,
               a->context_lens[b], a->max_k_len);
      attn_plugin_write_message(err, err_size, msg);
      return 1;
    }
    visible_keys(a, len, &vis_lo, &vis_hi);
    for (h = 0; h < a->num_heads; ++h) {
      const size_t row = (size_t)b * (size_t)a->num_heads + (size_t)h;
      load_query(a, row, q);
      for (t = 0; t < n; ++t) {
        float* part = ws + (row * (size_t)max_parts + (size_t)t) * stride;
        const int lo = t * P;
        int hi = lo + P < len ? lo + P : len;
        double m, l;
        if (drop_last_key && hi - lo == P) {
          hi -= 1;
        }
#if defined(SPLIT_BUG_OVERLAP)
        if (t < n - 1) {
          hi += 1;
        }
#endif
        attend(a, b, kv_head_of(a, h), q, lo, hi, vis_lo, vis_hi, &m, &l, acc);
        part[0] = (float)m;
        part[1] = (float)l;
        for (d = 0; d < D; ++d) {
          part[2 + d] = l > 0.0 ? (float)(acc[d] / l) : 0.0f;
        }
      }
    }
  }
  /* Pass 2, the "reduce kernel": SPEC.md's combination of the partials. */
  for (b = 0; b < a->batch; ++b) {
    const int len = kernel_len(a, a->context_lens[b]);
    const int n = num_partitions(len, partition_for(a, config, len));
    for (h = 0; h < a->num_heads; ++h) {
      const size_t row = (size_t)b * (size_t)a->num_heads + (size_t)h;
      const float* parts = ws + row * (size_t)max_parts * stride;
      double top = -INFINITY, sum = 0.0, lse;
      for (d = 0; d < D; ++d) {
        acc[d] = 0.0;
      }
#if defined(SPLIT_BUG_LSE_BASE2)
      /* top = max_t lse_t; w_t = 2^(lse_t - top); lse = top + log2(sum w_t). */
      for (t = 0; t < n; ++t) {
        const float* part = parts + (size_t)t * stride;
        if (part[1] > 0.0f && part[0] + log(part[1]) > top) {
          top = part[0] + log(part[1]);
        }
      }
      for (t = 0; t < n; ++t) {
        const float* part = parts + (size_t)t * stride;
        if (part[1] > 0.0f) {
          const double w = exp2(part[0] + log(part[1]) - top);
          sum += w;
          for (d = 0; d < D; ++d) {
            acc[d] += w * part[2 + d];
          }
        }
      }
      lse = top + log2(sum);
#else
      for (t = 0; t < n; ++t) {
        const float* part = parts + (size_t)t * stride;
        if (part[1] > 0.0f && part[0] > top) {
          top = part[0];
        }
      }
      for (t = 0; t < n; ++t) {
        const float* part = parts + (size_t)t * stride;
        if (part[1] > 0.0f) {
#if defined(SPLIT_BUG_MAX_NOT_RESCALED)
          const double w = part[1];
#else
          const double w = part[1] * exp(part[0] - top);
#endif
          sum += w;
          for (d = 0; d < D; ++d) {
            acc[d] += w * part[2 + d];
          }
        }
      }
      lse = top + log(sum);
#endif
      write_row(a, row, sum, acc, lse);
    }
  }
  return 0;
}

#if defined(SPLIT_SPIN)
/* The monotonic clock in seconds. */
static double spin_clock_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The planted cost of a call: v1 500 ns per key of the batch, v2 300 us + 250 ns per key. */
static double planted_seconds(const attn_call* a) {
  double keys = 0.0;
  int b;
  for (b = 0; b < a->batch; ++b) {
    keys += a->context_lens[b];
  }
  return a->family == ATTN_FAMILY_DECODE_V1 ? 500e-9 * keys : 300e-6 + 250e-9 * keys;
}
#endif

/* ---- the ABI -------------------------------------------------------------------------------- */

static int refuse(char* reason, size_t size, const char* msg) {
  attn_plugin_write_message(reason, size, msg);
  return 1;
}

static int can_run(void* state, const attn_config* config, const attn_call* a, char* reason,
                   size_t reason_size) {
  char msg[128];
  (void)state;
  if (a->family != ATTN_FAMILY_DECODE_V1 && a->family != ATTN_FAMILY_DECODE_V2) {
    return refuse(reason, reason_size, "only decode_v1 and decode_v2 are implemented");
  }
  if (a->kv_layout != ATTN_KV_HND) {
    return refuse(reason, reason_size, "only the HND layout is supported");
  }
  if (a->dtype != ATTN_DTYPE_F32 && a->dtype != ATTN_DTYPE_F16 && a->dtype != ATTN_DTYPE_BF16) {
    return refuse(reason, reason_size, "dtype is not fp32, fp16 or bf16");
  }
  if (a->block_size != 16 && a->block_size != 48) {
    snprintf(msg, sizeof msg, "block_size %d is not supported (16, 48)", a->block_size);
    return refuse(reason, reason_size, msg);
  }
  if (a->head_dim < 8 || a->head_dim > MAX_HEAD_DIM || a->head_dim % 8 != 0) {
    snprintf(msg, sizeof msg, "head_dim %d is not supported (multiples of 8 up to %d)", a->head_dim,
             MAX_HEAD_DIM);
    return refuse(reason, reason_size, msg);
  }
  if (a->num_heads < 1 || a->num_kv_heads < 1 || a->num_heads % a->num_kv_heads != 0) {
    snprintf(msg, sizeof msg, "num_heads %d is not a multiple of num_kv_heads %d", a->num_heads,
             a->num_kv_heads);
    return refuse(reason, reason_size, msg);
  }
#if ATTN_PLUGIN_ABI_VERSION >= 3
  if (a->seq_q_lens == NULL || a->seq_k_lens == NULL) {
    return refuse(reason, reason_size, "the host passed no sequence lengths (plugin ABI 3)");
  }
#endif
#if ATTN_PLUGIN_ABI_VERSION >= 4
#ifdef SPLIT_READS_FP8
  if (a->kv_dtype != ATTN_KV_DTYPE_AUTO && a->kv_dtype != ATTN_KV_DTYPE_FP8_E4M3 &&
      a->kv_dtype != ATTN_KV_DTYPE_FP8_E5M2) {
    return refuse(reason, reason_size, "kv_dtype is none of auto, fp8_e4m3, fp8_e5m2");
  }
  if (a->kv_dtype != ATTN_KV_DTYPE_AUTO && a->num_kv_scales != 1 &&
      a->num_kv_scales != a->num_kv_heads) {
    snprintf(msg, sizeof msg, "%d fp8 scales: neither 1 nor num_kv_heads %d", a->num_kv_scales,
             a->num_kv_heads);
    return refuse(reason, reason_size, msg);
  }
#else
  if (a->kv_dtype != ATTN_KV_DTYPE_AUTO) { /* the host never hands one: it declares none */
    return refuse(reason, reason_size, "this build reads no fp8 caches");
  }
#endif
#endif
#if !defined(SPLIT_OWN_SPLITS) /* its own splits are whole blocks of any size */
  if (a->family == ATTN_FAMILY_DECODE_V2) {
    const int P = config_value(config, "partition", 0);
    if (P <= 0 || P % a->block_size != 0) {
      snprintf(msg, sizeof msg, "partition %d is not a multiple of block_size %d", P,
               a->block_size);
      return refuse(reason, reason_size, msg);
    }
  }
#else
  (void)config;
#endif
  return 0;
}

static int workspace_size(void* state, const attn_config* config, const attn_call* a,
                          uint64_t* bytes, char* err, size_t err_size) {
  (void)state;
  (void)err;
  (void)err_size;
  *bytes = a->family == ATTN_FAMILY_DECODE_V2 ? v2_workspace_bytes(a, config) : 0;
  return 0;
}

#ifdef SPLIT_PREPARE
/* The prepared copy of both caches, and the ranges that declare it to the host. */
struct prepared_copy {
  void* k;
  void* v;
  attn_memory_range ranges[2];
};

static size_t cache_bytes(const attn_call* a) {
  const size_t elem = a->dtype == ATTN_DTYPE_F32 ? 4 : 2;
  return (size_t)a->num_blocks * (size_t)a->num_kv_heads * (size_t)a->block_size *
         (size_t)a->head_dim * elem;
}

static int prepare(void* state, const attn_config* config, const attn_call* a, void* workspace,
                   uint64_t workspace_bytes, void* stream, attn_prepared* out, char* err,
                   size_t err_size) {
  const size_t bytes = cache_bytes(a);
  struct prepared_copy* p = (struct prepared_copy*)calloc(1, sizeof *p);
  (void)state;
  (void)config;
  (void)workspace;
  (void)workspace_bytes;
  (void)stream;
  if (p == NULL || (p->k = malloc(bytes + 1)) == NULL || (p->v = malloc(bytes + 1)) == NULL) {
    if (p != NULL) {
      free(p->k);
      free(p);
    }
    attn_plugin_write_message(err, err_size, "out of memory for the prepared copy");
    return 1;
  }
  memcpy(p->k, a->key_cache, bytes);
  memcpy(p->v, a->value_cache, bytes);
  p->ranges[0].ptr = p->k;
  p->ranges[0].bytes = bytes;
  p->ranges[1].ptr = p->v;
  p->ranges[1].bytes = bytes;
  out->handle = p;
  out->ranges = p->ranges;
  out->num_ranges = 2;
  return 0;
}

static void release(void* state, const attn_config* config, attn_prepared* prepared) {
  struct prepared_copy* p = (struct prepared_copy*)prepared->handle;
  (void)state;
  (void)config;
  if (p != NULL) {
    free(p->k);
    free(p->v);
    free(p);
  }
}
#endif

static int run(void* state, const attn_config* config, const attn_call* a, void* workspace,
               uint64_t workspace_bytes, void* stream, char* err, size_t err_size) {
  char reason[160];
  (void)state;
  (void)stream;
#ifdef SPLIT_PREPARE
  attn_call own;
  if (a->prepared == NULL) {
    attn_plugin_write_message(err, err_size, "run without its prepared copy of the caches");
    return 1;
  }
  own = *a;
  own.key_cache = ((const struct prepared_copy*)a->prepared)->k;
  own.value_cache = ((const struct prepared_copy*)a->prepared)->v;
  a = &own;
#endif
  if (can_run(state, config, a, reason, sizeof reason) != 0) {
    attn_plugin_write_message(err, err_size, reason);
    return 1;
  }
#if ATTN_PLUGIN_ABI_VERSION >= 3
  {
    int b;
    for (b = 0; b < a->batch; ++b) {
      if (a->seq_q_lens[b] != 1 || a->seq_k_lens[b] != a->context_lens[b]) {
        snprintf(reason, sizeof reason,
                 "sequence %d: the host says q_len %d, k_len %d; context_lens says %d", b,
                 a->seq_q_lens[b], a->seq_k_lens[b], a->context_lens[b]);
        attn_plugin_write_message(err, err_size, reason);
        return 1;
      }
    }
  }
#endif
#if defined(SPLIT_SPIN)
  {
    const double start = spin_clock_s();
    int rc = 0;
    if (a->family == ATTN_FAMILY_DECODE_V1) {
      run_v1(a);
    } else {
      rc = run_v2(a, config, (float*)workspace, workspace_bytes, err, err_size);
    }
    while (rc == 0 && spin_clock_s() - start < planted_seconds(a)) {
    }
    return rc;
  }
#else
  if (a->family == ATTN_FAMILY_DECODE_V1) {
    run_v1(a);
    return 0;
  }
  return run_v2(a, config, (float*)workspace, workspace_bytes, err, err_size);
#endif
}

__attribute__((visibility("default"))) int attn_tune_plugin_init(uint32_t host_abi_version,
                                                                 attn_plugin_api* api,
                                                                 size_t api_size, char* err,
                                                                 size_t err_size) {
  ATTN_PLUGIN_CHECK_HOST(host_abi_version, api, api_size, err, err_size);
  api->name = SPLIT_NAME;
  api->version = "1.0";
  api->device_kind = ATTN_DEVICE_HOST;
  api->families = kFamilies;
  api->num_families = 2;
#ifdef SPLIT_READS_FP8
  api->kv_dtypes = kKvDtypes;
#endif
  api->state = NULL;
  api->can_run = can_run;
  api->workspace_size = workspace_size;
  api->run = run;
  api->destroy = NULL;
#ifdef SPLIT_PREPARE
  api->engine_rule = "seed";
  api->prepare = prepare;
  api->release = release;
#elif !defined(SPLIT_ABI1)
  api->engine_rule = SPLIT_ENGINE_RULE;
#endif
  return 0;
}
