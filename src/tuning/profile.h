// Sweep profiles: named grids of decode and prefill workloads, the kernel configurations to try
// on each, timing and validation options, and held-out points (schema in docs/profiles.md).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/backends/timing.h"
#include "src/model/kernel_config.h"
#include "src/model/problem.h"
#include "src/model/workload.h"
#include "src/tuning/length_mix.h"
#include "src/validation/row_sample.h"

namespace attn {

// The axes of one phase's grid. Decode uses context_len (uniform batches), context_lens
// (explicit mixed batches) and length_mix (mixed batches drawn for every batch size); prefill
// uses q_len and k_len. Exactly one of gqa_ratio and num_heads is given (the other stays empty).
struct PhaseGrid {
  std::vector<int> batch;
  std::vector<int> context_len;
  std::vector<std::vector<int>> context_lens; // each a whole batch, of its own size
  std::vector<LengthMix> length_mix;
  std::vector<int> q_len;
  std::vector<int> k_len;
  std::vector<int> num_kv_heads;
  std::vector<int> gqa_ratio;
  std::vector<int> num_heads;
  std::vector<int> head_dim;
  std::vector<int> block_size;
  std::vector<DType> dtype;
  // The KV cache's dtype: unset ("auto") for the query's dtype, else fp8_e4m3 or fp8_e5m2.
  std::vector<std::optional<DType>> kv_dtype{std::nullopt};
  std::vector<bool> causal;
  std::vector<int> window_left;
  std::vector<int> window_right;
  std::vector<double> softcap;
};

struct Profile {
  std::string name;
  std::string description;
  std::string hash; // 16 hex digits: FNV-1a 64 of the canonical JSON of the whole profile
  std::optional<PhaseGrid> decode;
  std::optional<PhaseGrid> prefill;
  // Per family: the listed configurations, or absent = "auto" (the backend's config_space).
  std::map<Family, std::vector<KernelConfig>> configs;
  TimingOptions timing;
  ValidationOptions validation;
  double pool_factor = 1.5; // cache blocks allocated per block needed (random order, unused ones)
  std::vector<Workload> held_out;
  // Decode batches from a traffic trace (sweep --traffic; never in a profile file): measured
  // after the grid, each weighted by its count, some held out. Their keys are folded into hash.
  std::vector<Workload> traffic;
};

// Adds the batches `t` gives (traffic_workloads) to `p` and folds them into its hash, so that a
// sweep resumed with another trace is not taken for the same one.
void add_traffic(Profile& p, std::vector<Workload> traffic);

// Parses a profile; `origin` names it in errors ("profile quick: decode.batch[2]: ...").
[[nodiscard]] Profile parse_profile(const nlohmann::json& j, const std::string& origin);
// By name (a profile embedded at build time from profiles/*.json) or by path (anything that
// names an existing file, contains a '/' or ends in .json). Throws InputError.
[[nodiscard]] Profile load_profile(const std::string& name_or_path);
// The names of the embedded profiles, sorted.
[[nodiscard]] std::vector<std::string> builtin_profile_names();
// The embedded JSON text of a profile, or nullopt.
[[nodiscard]] std::optional<std::string> builtin_profile_text(const std::string& name);

} // namespace attn
