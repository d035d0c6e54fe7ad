// Sweep profiles: named grids of decode and prefill workloads, the kernel configurations to try
// on each, timing and validation options, and held-out points (schema in docs/profiles.md).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/backends/backend.h"
#include "src/model/problem.h"
#include "src/backends/timing.h"

namespace attn {

// One mask variant; the grid crosses every value of each field.
struct MaskOption {
  bool causal = true;
  int window_left = -1;
  int window_right = -1;
  double softcap = 0.0;
  bool operator==(const MaskOption&) const = default;
};

// The axes of one phase's grid. Decode uses context_len; prefill uses q_len and k_len.
// Exactly one of gqa_ratio and num_heads is given (the other stays empty).
struct PhaseGrid {
  std::vector<int> batch;
  std::vector<int> context_len;
  std::vector<int> q_len;
  std::vector<int> k_len;
  std::vector<int> num_kv_heads;
  std::vector<int> gqa_ratio;
  std::vector<int> num_heads;
  std::vector<int> head_dim;
  std::vector<int> block_size;
  std::vector<DType> dtype;
  std::vector<bool> causal;
  std::vector<int> window_left;
  std::vector<int> window_right;
  std::vector<double> softcap;
};

// How much of the reference a check may compute. Every row is checked when the estimated
// reference work (sum over rows of k_len * head_dim * num_heads) is at most max_reference_work;
// otherwise a seeded sample of rows is checked (docs/profiles.md "Validation").
struct ValidationOptions {
  int64_t max_reference_work = 200'000'000;
  int min_rows = 4;
};

// One concrete workload: a phase, attention parameters and uniform sequence lengths.
struct Workload {
  Phase phase = Phase::decode;
  AttnParams params;
  int batch = 1;
  int context_len = 0; // decode
  int q_len = 0;       // prefill
  int k_len = 0;       // prefill
  bool held_out = false;

  // "decode b=4 ctx=1024 h=32 kvh=8 d=128 bs=16 fp16 causal wl=-1 wr=-1 cap=0": stable, used as
  // the resume key in results.jsonl together with KernelConfig::key().
  [[nodiscard]] std::string key() const;
  [[nodiscard]] nlohmann::json to_json() const;
  [[nodiscard]] static Workload from_json(const nlohmann::json& j); // throws InputError
  [[nodiscard]] MaskOption mask() const;
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
};

// Parses a profile; `origin` names it in errors ("profile quick: decode.batch[2]: ...").
[[nodiscard]] Profile parse_profile(const nlohmann::json& j, const std::string& origin);
// By name (a profile embedded at build time from profiles/*.json) or by path (anything that
// names an existing file, contains a '/' or ends in .json). Throws InputError.
[[nodiscard]] Profile load_profile(const std::string& name_or_path);
// The names of the embedded profiles, sorted.
[[nodiscard]] std::vector<std::string> builtin_profile_names();
// The embedded JSON text of a profile, or nullopt.
[[nodiscard]] std::optional<std::string> builtin_profile_text(const std::string& name);

// The grid's workloads in a stable order (phase, then the axes in schema order), followed by
// the held-out workloads (flagged). Prefill pairs with q_len > k_len are left out.
[[nodiscard]] std::vector<Workload> expand_workloads(const Profile& p);

// The configurations to try on a workload: the profile's list or the backend's config_space.
[[nodiscard]] std::vector<KernelConfig> configs_for(const Profile& p, const Backend& be,
                                                    const Workload& w);

// 64-bit FNV-1a, as 16 lower-case hex digits (profile and record hashes).
[[nodiscard]] std::string fnv1a_hex(const std::string& s);
[[nodiscard]] uint64_t fnv1a(const std::string& s);

} // namespace attn
