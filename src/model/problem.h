// The problem model: attention parameters, the paged KV cache with its block tables, and a
// decode or prefill batch (SPEC.md "Tensors"). Everything that computes attention takes a Problem.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/attn_math.h"
#include "src/model/dtype.h"
#include "src/model/kv_layout.h"
#include "src/model/tensor.h"

namespace attn {

struct AttnParams {
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  DType dtype = DType::f16; // queries and outputs (fp32, fp16 or bf16)
  // The KV cache's dtype where it differs from `dtype`: fp8_e4m3 or fp8_e5m2 (SPEC.md "fp8 KV
  // caches"); unset ("auto"): the cache has the query's dtype.
  std::optional<DType> kv_dtype{};
  bool causal = true;
  int window_left = -1;        // -1: unbounded
  int window_right = -1;       // -1: unbounded
  double softcap = 0.0;        // 0: off
  std::optional<double> scale; // unset: 1/sqrt(head_dim)

  [[nodiscard]] double effective_scale() const;
  // The caches' storage dtype: kv_dtype, else dtype.
  [[nodiscard]] DType cache_dtype() const { return kv_dtype.value_or(dtype); }
  [[nodiscard]] bool fp8_cache() const { return is_fp8(cache_dtype()); }
  // 0 for parameters not yet validated (no division by zero on the way to the check).
  [[nodiscard]] int group_size() const { return num_kv_heads > 0 ? num_heads / num_kv_heads : 0; }
  // The mask options as the kernels and the reference read them (kernels/attn_math.h).
  [[nodiscard]] attn_math::Mask mask() const { return {causal ? 1 : 0, window_left, window_right}; }
  // Throws InputError naming the first invalid field and its value.
  void validate() const;
  // "h=28 kvh=4 d=128 bs=16 fp16 causal win=-1,-1 softcap=0" (" kv=fp8_e4m3" after the dtype
  // for an fp8 cache)
  [[nodiscard]] std::string describe() const;
};

// Query-key pairs that `m` lets through in one sequence of q_len queries over k_len keys:
// attn_math::visible_range summed over its rows, the one definition of a row's visible keys.
[[nodiscard]] int64_t visible_pairs(const attn_math::Mask& m, int q_len, int k_len);

// Limits of the problem model (backends may support less; their can_run says so).
inline constexpr int kMaxHeadDim = 512;
// Head sizes are multiples of this (profiles, traces and problems hold them to it).
inline constexpr int kHeadDimStep = 8;
inline constexpr int kMaxBlockSize = 1024;

enum class Phase { decode, prefill };
[[nodiscard]] const char* phase_name(Phase p);

// with_kv_layout copies every field but the caches by name: a new field goes there too.
struct Problem {
  Phase phase = Phase::decode;
  AttnParams params;
  int batch = 0;
  int num_blocks = 0;
  int max_blocks_per_seq = 0;
  std::vector<int32_t> block_tables; // [batch, max_blocks_per_seq]
  std::vector<int32_t> context_lens; // decode: [batch]
  std::vector<int32_t> cu_seqlens_q; // prefill: [batch + 1]
  std::vector<int32_t> cu_seqlens_k; // prefill: [batch + 1]
  HostTensor query;                  // [rows, num_heads, head_dim]
  // How both caches are arranged; their shapes are key_cache_shape/value_cache_shape of it.
  KvLayout kv_layout = KvLayout::HND;
  HostTensor key_cache;   // HND: [num_blocks, num_kv_heads, block_size, head_dim]
  HostTensor value_cache; // HND: same as key_cache
  // Dequantisation scales of an fp8 cache: empty (1.0), one per tensor, or one per KV head. A
  // cached element stands for float(element) * scale. Caches of other dtypes have none.
  std::vector<float> k_scale{};
  std::vector<float> v_scale{};
  uint64_t seed = 0;      // generator seed (0 for loaded problems)

  // An fp8 cache's scales as kernels take them (plugin ABI 4, the CUDA kernels): both per tensor
  // (1 each) unless either is per KV head (num_kv_heads each); 0 for other caches.
  [[nodiscard]] int num_kv_scales() const {
    if (!params.fp8_cache()) {
      return 0;
    }
    return k_scale.size() > 1 || v_scale.size() > 1 ? params.num_kv_heads : 1;
  }
  // The first num_kv_scales() key (value) scales, one per entry.
  [[nodiscard]] std::vector<float> kernel_key_scales() const { return kernel_scales(k_scale); }
  [[nodiscard]] std::vector<float> kernel_value_scales() const { return kernel_scales(v_scale); }
  [[nodiscard]] std::vector<float> kernel_scales(const std::vector<float>& s) const {
    std::vector<float> out;
    for (int h = 0; h < num_kv_scales(); ++h) {
      out.push_back(scale_of(s, h));
    }
    return out;
  }
  // The scale of KV head kvh's keys or values (1 where there are none).
  [[nodiscard]] float key_scale(int kvh) const { return scale_of(k_scale, kvh); }
  [[nodiscard]] float value_scale(int kvh) const { return scale_of(v_scale, kvh); }
  [[nodiscard]] static float scale_of(const std::vector<float>& s, int kvh) {
    return s.empty() ? 1.0f : s.size() == 1 ? s[0] : s[std::size_t(kvh)];
  }
  // Query rows: batch for decode, total_q for prefill.
  [[nodiscard]] int num_rows() const;
  [[nodiscard]] int q_start(int b) const { return phase == Phase::decode ? b : cu_seqlens_q[b]; }
  [[nodiscard]] int q_len(int b) const {
    return phase == Phase::decode ? 1 : cu_seqlens_q[b + 1] - cu_seqlens_q[b];
  }
  [[nodiscard]] int k_len(int b) const {
    return phase == Phase::decode ? context_lens[b] : cu_seqlens_k[b + 1] - cu_seqlens_k[b];
  }
  [[nodiscard]] int max_k_len() const;
  [[nodiscard]] int max_q_len() const;
  // The caches' geometry in this problem's layout (element offsets of block, head, slot, dim).
  [[nodiscard]] KvCacheGeometry kv_geometry() const {
    return kv_cache_geometry(kv_layout, params.cache_dtype(), params.num_kv_heads,
                             params.block_size, params.head_dim);
  }
  // Element offsets of dim d of key/value position j of sequence b, kv head kvh, through the
  // block table, in any layout.
  [[nodiscard]] int64_t key_index(int b, int kvh, int j, int d) const {
    return kv_geometry().key_index(physical_block(b, j), kvh, j % params.block_size, d);
  }
  [[nodiscard]] int64_t value_index(int b, int kvh, int j, int d) const {
    return kv_geometry().value_index(physical_block(b, j), kvh, j % params.block_size, d);
  }
  [[nodiscard]] int64_t physical_block(int b, int j) const {
    return block_tables[std::size_t(b) * std::size_t(max_blocks_per_seq) +
                        std::size_t(j / params.block_size)];
  }
  // HND only (the layout the built-in kernels read): element offset of key/value position j of
  // sequence b, kv head kvh, dim 0; dims follow contiguously. Other layouts: key_index.
  [[nodiscard]] int64_t kv_offset(int b, int kvh, int j) const {
    return attn_math::paged_kv_offset(block_tables.data() + std::size_t(b) * max_blocks_per_seq,
                                      params.block_size, params.num_kv_heads, kvh, params.head_dim,
                                      j);
  }
  // Bytes of the query and both caches as stored: what a copy of the problem's inputs takes.
  [[nodiscard]] int64_t input_bytes() const {
    return int64_t(query.data.size() + key_cache.data.size() + value_cache.data.size());
  }
  // Key bytes plus value bytes that attention must read once (visible or not, as stored).
  [[nodiscard]] int64_t kv_bytes_touched() const;
  // Query-key pairs that the mask lets through, summed over heads (for FLOP counts).
  [[nodiscard]] int64_t visible_pairs() const;
  // Throws InputError naming the first inconsistency (shapes, lengths, block table entries).
  void validate() const;
  [[nodiscard]] std::string describe() const;
};

// An fp8 problem's scales in words, for the lines that judge it: "k_scale 0.05, v_scale 4",
// "k_scale per KV head 0.05, 2, v_scale per KV head 4, 0.3" (eight at most, then the count), or
// "no k_scale (1, as SPEC.md reads one absent)"; empty for a cache of the query's dtype.
[[nodiscard]] std::string fp8_scale_words(const Problem& pr);

// A copy of `pr` with both caches rearranged into layout `to` (same values, same block tables);
// a plain copy when it is already in `to`. Throws InputError when the caches do not have the
// shapes of pr.kv_layout.
[[nodiscard]] Problem with_kv_layout(const Problem& pr, KvLayout to);

// Flips the sign of every element of the query and of both caches, unread slots included (the
// top bit of each element, in every dtype): the same shapes with other contents, whose exact
// output is the old one negated and whose lse is the old one (each score is (-q).(-k) = q.k).
// The fp8 scales stay. Applied twice it restores the problem.
void negate_inputs(Problem& p);
// Where an fp8 problem holds both scales (k_scale and v_scale given): the query halved and both
// scales doubled (back: the query doubled, the scales halved), in place, as an engine that
// recalibrates its scales writes them into the same buffers. Each score is (q / 2).(2 k) = q.k,
// so the exact output is the old one doubled, the lse the old one (a query element that is an
// fp16 subnormal may round: within any tolerance). False, and nothing changed, elsewhere.
bool rescale_inputs(Problem& p, bool back);
// The same sign flip over raw elements of `element_bytes` each (little-endian: each element's
// top byte), for a copy of a problem's buffer held elsewhere (a device buffer brought back).
void negate_elements(std::byte* data, std::size_t bytes, std::size_t element_bytes);

} // namespace attn
