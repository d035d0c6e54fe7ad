// The problem model: attention parameters, the paged KV cache with its block tables, and a
// decode or prefill batch (SPEC.md "Tensors"). Everything that computes attention takes a Problem.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/attn_math.h"
#include "src/model/dtype.h"
#include "src/model/tensor.h"

namespace attn {

struct AttnParams {
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  DType dtype = DType::f16;
  bool causal = true;
  int window_left = -1;        // -1: unbounded
  int window_right = -1;       // -1: unbounded
  double softcap = 0.0;        // 0: off
  std::optional<double> scale; // unset: 1/sqrt(head_dim)

  [[nodiscard]] double effective_scale() const;
  [[nodiscard]] int group_size() const { return num_heads / num_kv_heads; }
  // Throws InputError naming the first invalid field and its value.
  void validate() const;
  // "h=28 kvh=4 d=128 bs=16 fp16 causal win=-1,-1 softcap=0"
  [[nodiscard]] std::string describe() const;
};

// Limits of the problem model (backends may support less; their can_run says so).
inline constexpr int kMaxHeadDim = 512;
inline constexpr int kMaxBlockSize = 1024;

enum class Phase { decode, prefill };
[[nodiscard]] const char* phase_name(Phase p);

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
  HostTensor key_cache;              // [num_blocks, num_kv_heads, block_size, head_dim]
  HostTensor value_cache;            // same as key_cache
  uint64_t seed = 0;                 // generator seed (0 for loaded problems)

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
  // Element offset of key/value position j of sequence b, kv head kvh, dim 0, in the caches.
  [[nodiscard]] int64_t kv_offset(int b, int kvh, int j) const {
    return attn_math::paged_kv_offset(block_tables.data() + std::size_t(b) * max_blocks_per_seq,
                                      params.block_size, params.num_kv_heads, kvh, params.head_dim,
                                      j);
  }
  // Key bytes plus value bytes that attention must read once (visible or not, as stored).
  [[nodiscard]] int64_t kv_bytes_touched() const;
  // Query-key pairs that the mask lets through, summed over heads (for FLOP counts).
  [[nodiscard]] int64_t visible_pairs() const;
  // Throws InputError naming the first inconsistency (shapes, lengths, block table entries).
  void validate() const;
  [[nodiscard]] std::string describe() const;
};

// Options of the seeded generator.
struct GenOptions {
  uint64_t seed = 1;
  double pool_factor = 3.0;   // physical blocks allocated per block needed (>= 1)
  bool shared_prefix = false; // sequences share their first full blocks (prefix caching)
};

// Decode batch: one query row per sequence, context_lens[b] keys each.
[[nodiscard]] Problem make_decode_problem(const AttnParams& p, const std::vector<int>& context_lens,
                                          const GenOptions& opt);
// Prefill batch: q_lens[b] query rows over k_lens[b] keys (q_len < k_len is chunked prefill).
[[nodiscard]] Problem make_prefill_problem(const AttnParams& p, const std::vector<int>& q_lens,
                                           const std::vector<int>& k_lens, const GenOptions& opt);

// The edge lengths of SPEC.md "Test data" that are <= max_len: 1, bs-1, bs, bs+1, partition
// boundaries +-1 (for each partition size given), and max_len itself. Sorted, unique, >= 1.
[[nodiscard]] std::vector<int> edge_lengths(int block_size, const std::vector<int>& partition_sizes,
                                            int max_len);
// `count` ragged lengths in [1, max_len]: the edges first (shuffled), then random lengths.
[[nodiscard]] std::vector<int> ragged_lengths(uint64_t seed, int count, int block_size,
                                              const std::vector<int>& partition_sizes, int max_len);

} // namespace attn
