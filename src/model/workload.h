// A workload: one concrete attention shape a sweep measures (a phase, attention parameters and
// uniform sequence lengths, or a decode batch of mixed context lengths), with the stable key that
// results files and tables are keyed by.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/model/problem.h"

namespace attn {

// The largest workloads any reader accepts (results lines, tables, profiles, traces): a context
// or sequence length, sequences in one batch, attention heads.
inline constexpr int kMaxContextLen = 10'000'000;
inline constexpr int kMaxBatch = 65'536;
inline constexpr int kMaxHeads = 4096;

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
  // decode, a batch given sequence by sequence (a profile's context_lens or length_mix, a
  // traffic trace; usually of mixed lengths): every sequence's context length (batch of them;
  // context_len is the longest). Empty: a grid point, every sequence has context_len.
  std::vector<int> context_lens;
  // How often the batch occurred in the traffic it was drawn from (a trace's count): what
  // traffic-weighted regret weighs it by. 1 for grid points.
  double weight = 1.0;
  bool held_out = false;

  [[nodiscard]] bool mixed() const { return !context_lens.empty(); }
  // Every sequence's context length (decode): context_lens, or batch copies of context_len.
  [[nodiscard]] std::vector<int> decode_lens() const;
  // Makes this a decode batch whose sequences have the lengths `lens` (non-empty, each >= 1);
  // batch and context_len (the longest) follow them.
  void set_decode_lens(const std::vector<int>& lens);

  // "decode b=4 ctx=1024 h=32 kvh=8 d=128 bs=16 fp16 causal wl=-1 wr=-1 cap=0": stable, used as
  // the resume key in results.jsonl together with KernelConfig::key(). A batch given sequence by
  // sequence has ctx "mix:MAX/SUM/HASH" (its longest and total length, 8 hex digits of FNV-1a
  // over the list).
  [[nodiscard]] std::string key() const;
  [[nodiscard]] nlohmann::json to_json() const;
  // Checks every field's type and range ("workload.num_kv_heads: expected an integer from 1 to
  // 32, got 0"); throws InputError.
  [[nodiscard]] static Workload from_json(const nlohmann::json& j);
  [[nodiscard]] MaskOption mask() const;
};

// The problem a workload stands for, with seeded data (`pool_factor` cache blocks allocated per
// block needed).
[[nodiscard]] Problem make_workload_problem(const Workload& w, double pool_factor, uint64_t seed,
                                            int threads = 1);

// Why the problem a workload stands for cannot be made, before anything is measured: its cache
// takes more blocks (pool_factor per block its sequences need) than problem generation's limit of
// 2^30; empty when it can be. A profile within every axis's range can still ask for such a batch
// (65,536 sequences drawn up to 10M tokens).
[[nodiscard]] std::string workload_too_big(const Workload& w, double pool_factor);

// The bytes the key and value caches of that problem take (pool_factor included), as
// make_workload_problem allocates them: what a caller planning memory counts on.
[[nodiscard]] double workload_cache_bytes(const Workload& w, double pool_factor);

// 64-bit FNV-1a, as 16 lower-case hex digits (profile and record hashes).
[[nodiscard]] std::string fnv1a_hex(const std::string& s);
[[nodiscard]] uint64_t fnv1a(const std::string& s);

} // namespace attn
