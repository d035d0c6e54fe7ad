// The CPU attention kernels: a work item attends a few query vectors of one KV group over a key
// range of the paged cache (online softmax, kernels/attn_math.h), plus the split-KV reduce.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/attn_math.h"
#include "src/backends/cpu/isa.h"
#include "src/model/dtype.h"

namespace attn::cpu {

// Raw views of one problem and its outputs (the prepared run owns the memory).
struct KernelArgs {
  DType dtype = DType::f32; // queries and outputs, and the caches unless kv_dtype is fp8
  // An fp8 cache's dtype (fp8_e4m3 or fp8_e5m2) and its scales, k_scales and v_scales entries
  // each (0: none, 1: per tensor, num_kv_heads: per KV head); any other kv_dtype: the caches are
  // `dtype`.
  DType kv_dtype = DType::f32;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  int k_scales = 0;
  int v_scales = 0;
  // Whether the decode loops read E4M3 by moving its bits into fp32s (fp8 subnormals becoming
  // fp32 subnormals) rather than through fp16 bits: Fp8Reads::via_fp32 (isa.h), the processor's
  // choice. E5M2 goes through fp16 bits at AVX2 and AVX-512 whatever this says; the portable
  // build always moves bits (it has no fp16 conversion instruction).
  bool fp8_via_fp32 = false;
  [[nodiscard]] bool fp8_cache() const { return is_fp8(kv_dtype); }
  [[nodiscard]] float key_scale(int kvh) const { return scale_at(k_scale, k_scales, kvh); }
  [[nodiscard]] float value_scale(int kvh) const { return scale_at(v_scale, v_scales, kvh); }
  [[nodiscard]] static float scale_at(const float* s, int n, int kvh) {
    return n == 0 ? 1.0f : n == 1 ? s[0] : s[kvh];
  }
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  int group = 1; // num_heads / num_kv_heads
  float scale = 1.0f;
  float softcap = 0.0f;
  attn_math::Mask mask{1, -1, -1};
  const void* query = nullptr;           // [rows, num_heads, head_dim]
  const void* key_cache = nullptr;       // [num_blocks, num_kv_heads, block_size, head_dim]
  const void* value_cache = nullptr;     // same
  const int32_t* block_tables = nullptr; // [batch, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  const int32_t* seq_q_start = nullptr; // [batch]: first query row of each sequence
  const int32_t* seq_q_len = nullptr;   // [batch]
  const int32_t* seq_k_len = nullptr;   // [batch]
  void* out = nullptr;                  // [rows, num_heads, head_dim], dtype
  float* lse = nullptr;                 // [rows, num_heads]
  // Split-KV partials of decode_v2, indexed [(b * num_heads + head) * max_parts + part].
  int partition = 0;
  int max_parts = 0;
  float* part_m = nullptr;
  float* part_l = nullptr;
  float* part_o = nullptr; // times head_dim
};

// Query rows [row_begin, row_end) (0-based within sequence b) times query heads
// [head_begin, head_begin + heads) (one KV group, so one pass over K/V serves them all), over
// the keys of partition `part` (writing partials) or over all keys when part < 0 (writing out
// and lse).
struct WorkItem {
  int b = 0;
  int row_begin = 0;
  int row_end = 1;
  int head_begin = 0;
  int heads = 1;
  int part = -1;
};

// Per-worker buffers, sized once for the largest work item of a prepared run. A work item's
// query vectors are its rows times its heads; "lanes" are those padded to whole vectors.
struct Scratch {
  std::vector<float> q;      // [vectors, head_dim] queries as fp32
  std::vector<float> acc;    // [vectors, head_dim] unnormalised outputs
  std::vector<float> scores; // [vectors, ld] scores, then probabilities (few vectors)
  int ld = 0;                // k_tile rounded up to 32
  std::vector<float> qt;     // [head_dim, lanes] queries transposed (many vectors)
  std::vector<float> st;     // [k_tile + pad, lanes] scores transposed, then probabilities
  std::vector<int32_t> lo_lane, hi_lane;         // [lanes] visible keys of each vector's row
  std::vector<float> m_lane, l_lane, alpha_lane; // [lanes] online softmax state per vector
  std::vector<float> kv;          // [k_tile, head_dim] converted K, then V, rows of one tile
  std::vector<float> zero_row;    // [head_dim] zeros: the rows that pad a tile to whole blocks
  std::vector<const float*> rows; // [k_tile + pad] fp32 row pointers (into kv, or the fp32 cache)
  std::vector<const void*> raw_rows;        // [k_tile + pad] row pointers into a 16-bit cache
  std::vector<const void*> ahead; // [2 k_tile] the next tile's K and V rows, key by key
  std::vector<attn_math::OnlineSoftmax> sm; // [vectors] (few vectors)
  std::vector<int> lo, hi; // [rows] visible key range of each query row, clipped to the item
};
void size_scratch(Scratch& s, int max_rows, int max_heads, int head_dim, int k_tile);

// Runs one work item, reading keys in tiles of k_tile (any positive count; tiles may cross
// cache blocks). `s` must be sized for the item.
void attend(Isa isa, const KernelArgs& a, const WorkItem& it, int k_tile, Scratch& s);

// Combines the partials of (sequence b, query head) into out and lse; `tmp` holds head_dim floats.
void combine_partials(Isa isa, const KernelArgs& a, int b, int head, float* tmp);

// Stores n fp32 values as dtype t with the kernels' output loop (exposed for tests).
void store_floats(Isa isa, DType t, const float* src, void* dst, std::size_t n);

// Converts n stored values to fp32, exactly, with the kernels' vectorised loop (exposed for
// tests): for fp8, the in-place loads times the power of two they leave out, and the test of
// special values the buffer path makes.
void convert_to_float(Isa isa, DType t, const void* src, float* dst, std::size_t n);

} // namespace attn::cpu
