// A workload: one concrete attention shape a sweep measures (a phase, attention parameters and
// uniform sequence lengths), with the stable key that results files and tables are keyed by.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "src/model/problem.h"

namespace attn {

// One mask variant; the grid crosses every value of each field.
struct MaskOption {
  bool causal = true;
  int window_left = -1;
  int window_right = -1;
  double softcap = 0.0;
  bool operator==(const MaskOption&) const = default;
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

// The problem a workload stands for, with seeded data (`pool_factor` cache blocks allocated per
// block needed).
[[nodiscard]] Problem make_workload_problem(const Workload& w, double pool_factor, uint64_t seed);

// 64-bit FNV-1a, as 16 lower-case hex digits (profile and record hashes).
[[nodiscard]] std::string fnv1a_hex(const std::string& s);
[[nodiscard]] uint64_t fnv1a(const std::string& s);

} // namespace attn
