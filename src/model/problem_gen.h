// The seeded problem generator (SPEC.md "Test data"): decode and prefill batches whose block
// tables and values follow from a seed alone, and the ragged and edge sequence lengths tests use.
#pragma once
#include <cstdint>
#include <vector>

#include "src/model/kv_layout.h"
#include "src/model/problem.h"

namespace attn {

// Options of the seeded generator.
struct GenOptions {
  uint64_t seed = 1;
  double pool_factor = 3.0;   // physical blocks allocated per block needed (>= 1)
  bool shared_prefix = false; // sequences share their first full blocks (prefix caching)
  // The caches' layout. Values are drawn in HND and then rearranged, so one seed gives the same
  // logical keys and values in every layout.
  KvLayout kv_layout = KvLayout::HND;
  // An fp8 cache's scales (Problem::k_scale, v_scale): empty (1), one, or one per KV head. The
  // cache holds each drawn value x quantised as SPEC.md says an engine's cache write does:
  // x / scale, rounded to nearest even and saturated; a small scale puts values near saturation.
  std::vector<float> k_scale{};
  std::vector<float> v_scale{};
  // The slots of each sequence's last block past its length (which no query may see) hold NaN in
  // both caches, as an engine's cache holds whatever was there before: a kernel that reads them
  // and multiplies by a zero probability (0 * NaN = NaN) instead of leaving them out turns its
  // outputs into NaN (vLLM's paged attention zeroes such values for this reason, vllm-project/vllm
  // issue 641). The slots read keep exactly the values they have without it.
  bool nan_tails = false;
  // Threads that may draw the values: with 2 or more (0: every hardware thread), the key and
  // value caches are filled side by side, each from its own stream, so the values are the same
  // whatever the count.
  int threads = 1;
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
