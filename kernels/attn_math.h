// Attention math shared by every kernel: the SPEC.md mask predicate and visible key range, the
// paged K/V address, softcap, split-KV partition bounds, the online-softmax update and the
// partial combine.
// Plain C++ with __host__ __device__ under CUDA: the CPU backend and its tests run exactly
// the code the GPU kernels include (NVRTC compiles this file with no standard headers).
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ATTN_HD __host__ __device__ __forceinline__
#else
#include <cmath>
#define ATTN_HD inline
#endif

namespace attn_math {

ATTN_HD float neg_inf() {
#if defined(__CUDA_ARCH__)
  return __int_as_float(0xff800000);
#else
  return -HUGE_VALF;
#endif
}

ATTN_HD int imin(int a, int b) { return a < b ? a : b; }
ATTN_HD int imax(int a, int b) { return a > b ? a : b; }

// The mask options of one call. -1 means unbounded for both windows.
struct Mask {
  int causal;
  int window_left;
  int window_right;
};

// Absolute position of query row i (0-based within its sequence): bottom-right aligned.
ATTN_HD int row_position(int q_len, int k_len, int i) { return k_len - q_len + i; }

// Whether key j is visible from a query at absolute position pos.
ATTN_HD bool key_visible(const Mask& m, int pos, int j) {
  // 64-bit: windows near INT_MAX and negative positions must not overflow.
  return (!m.causal || j <= pos) &&
         (m.window_left < 0 || (long long)j >= (long long)pos - m.window_left) &&
         (m.window_right < 0 || (long long)j <= (long long)pos + m.window_right);
}

// Visible keys of a query at position pos form the half-open range [*lo, *hi) inside
// [0, k_len); empty when *lo >= *hi. Every kernel iterates this range only.
ATTN_HD void visible_range(const Mask& m, int pos, int k_len, int* lo, int* hi) {
  // 64-bit bounds: pos - window_left and pos + window_right + 1 overflow int for windows near
  // INT_MAX (engines pass such values for "unbounded") or for negative positions (q_len > k_len).
  long long l = 0;
  long long h = k_len; // exclusive
  if (m.causal) {
    h = h < (long long)pos + 1 ? h : (long long)pos + 1;
  }
  if (m.window_left >= 0) {
    const long long w = (long long)pos - m.window_left;
    l = l > w ? l : w;
  }
  if (m.window_right >= 0) {
    const long long w = (long long)pos + m.window_right + 1;
    h = h < w ? h : w;
  }
  // l >= 0 and h <= k_len; clamping the other ends keeps both in [0, k_len] (empty: lo >= hi).
  *lo = (int)(l > k_len ? k_len : l);
  *hi = (int)(h < 0 ? 0 : h);
}

// Union of the visible ranges of rows [row_begin, row_end) of one sequence (rows move
// monotonically, so it is the range from the first row's lo to the last row's hi).
ATTN_HD void visible_range_rows(const Mask& m, int q_len, int k_len, int row_begin, int row_end,
                                int* lo, int* hi) {
  int lo0, hi0, lo1, hi1;
  visible_range(m, row_position(q_len, k_len, row_begin), k_len, &lo0, &hi0);
  visible_range(m, row_position(q_len, k_len, row_end - 1), k_len, &lo1, &hi1);
  *lo = lo0;
  *hi = imax(hi0, hi1);
}

// Element offset of key/value position j of one sequence in a paged cache
// [num_blocks, num_kv_heads, block_size, head_dim] (SPEC.md "Tensors", HND): slot j % block_size
// of page table_row[j / block_size], kv head kvh, dim 0. table_row is the sequence's row of
// block_tables. 64-bit: a cache may hold more than 2^31 elements.
ATTN_HD long long paged_kv_offset(const int* table_row, int block_size, int num_kv_heads, int kvh,
                                  int head_dim, int j) {
  const long long page = table_row[j / block_size];
  return ((page * num_kv_heads + kvh) * block_size + j % block_size) * head_dim;
}

// s -> softcap * tanh(s / softcap) when softcap > 0.
ATTN_HD float apply_softcap(float s, float softcap) {
  return softcap > 0.0f ? softcap * tanhf(s / softcap) : s;
}

// Split-KV: partition t of size P covers keys [t*P, min((t+1)*P, k_len)).
ATTN_HD int num_partitions(int k_len, int partition_size) {
  return (k_len + partition_size - 1) / partition_size;
}
ATTN_HD void partition_bounds(int t, int partition_size, int k_len, int* begin, int* end) {
  *begin = t * partition_size;
  *end = imin((t + 1) * partition_size, k_len);
}

// Running max and sum of one softmax row. Accumulators that hold sum_j exp(s_j - m) * v_j
// must be multiplied by the factor that update() returns before adding the new terms.
struct OnlineSoftmax {
  float m; // running max score (neg_inf() before any key)
  float l; // running sum of exp(s - m)

  ATTN_HD static OnlineSoftmax empty() { return {neg_inf(), 0.0f}; }

  // Take a block of scores whose maximum is block_max; returns the rescale factor for the old
  // accumulators (0 when there were none) and moves m to the new maximum.
  ATTN_HD float update(float block_max) {
    if (block_max <= m) {
      return 1.0f;
    }
    const float alpha = (m == neg_inf()) ? 0.0f : expf(m - block_max);
    l *= alpha;
    m = block_max;
    return alpha;
  }
  // exp(s - m) for a score of the current block (0 for masked scores, -inf).
  ATTN_HD float weight(float s) const { return s == neg_inf() ? 0.0f : expf(s - m); }
  ATTN_HD void add(float w) { l += w; }
  // Natural-log sum of exponentials; -inf for a row with no visible key.
  ATTN_HD float lse() const { return l > 0.0f ? m + logf(l) : neg_inf(); }
  // Factor that turns the accumulators into the normalised output (0 for empty rows).
  ATTN_HD float inv_sum() const { return l > 0.0f ? 1.0f / l : 0.0f; }
};

// The same running state in base 2, for kernels that keep their scores multiplied by log2(e):
// one exp2 per score (a single MUFU instruction on GPUs) instead of expf. m and the scores are in
// log2 units; lse() converts back to the natural log.
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct OnlineSoftmax2 {
  float m; // running max of log2-scaled scores
  float l; // running sum of exp2(s - m)

  ATTN_HD static OnlineSoftmax2 empty() { return {neg_inf(), 0.0f}; }
  ATTN_HD float update(float block_max) {
    if (block_max <= m) {
      return 1.0f;
    }
    const float alpha = (m == neg_inf()) ? 0.0f : exp2f(m - block_max);
    l *= alpha;
    m = block_max;
    return alpha;
  }
  ATTN_HD float weight(float s) const { return s == neg_inf() ? 0.0f : exp2f(s - m); }
  ATTN_HD void add(float w) { l += w; }
  ATTN_HD float lse() const { return l > 0.0f ? m * kLn2 + logf(l) : neg_inf(); }
  ATTN_HD float inv_sum() const { return l > 0.0f ? 1.0f / l : 0.0f; }
};

// Combine of partials (m_t, l_t, o_t): weight of partition t relative to the global max m.
// A partition with no visible key (l_t = 0) weighs nothing.
ATTN_HD float combine_weight(float m_t, float l_t, float m) {
  return l_t > 0.0f ? l_t * expf(m_t - m) : 0.0f;
}
// Factor exp(m_t - m) that rescales an unnormalised accumulator taken relative to m_t onto
// the max m; 0 for an empty state (l_t = 0, m_t possibly -inf). Merging two running states
// (m1, l1, a1) and (m2, l2, a2): m = max, l = l1 f1 + l2 f2, a = a1 f1 + a2 f2.
ATTN_HD float combine_scale(float m_t, float l_t, float m) {
  return l_t > 0.0f ? expf(m_t - m) : 0.0f;
}
// Global max over partials, ignoring empty ones; neg_inf() when every partition is empty.
ATTN_HD float combine_max(float acc, float m_t, float l_t) {
  return (l_t > 0.0f && m_t > acc) ? m_t : acc;
}
// lse of the combined row from the global max and the summed weights.
ATTN_HD float combine_lse(float m, float weight_sum) {
  return weight_sum > 0.0f ? m + logf(weight_sum) : neg_inf();
}

} // namespace attn_math
