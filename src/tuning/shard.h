// Sharded sweeps: a fixed, balanced part of a profile's plan for one of N devices (`sweep --shard
// I/N`), so that the shards together measure the unsharded plan once, and `merge` can join them.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/model/workload.h"

namespace attn {

// The most shards one plan is split into (--shard, results headers, merge).
inline constexpr int kMaxShards = 4096;

// Shard `index` of `count`, 0-based (SLURM_ARRAY_TASK_ID and Ray's actor numbers count from 0).
// 0/1 is the whole plan.
struct ShardSpec {
  int index = 0;
  int count = 1;
  [[nodiscard]] bool sharded() const { return count > 1; }
  [[nodiscard]] std::string text() const; // "1/4"
  bool operator==(const ShardSpec&) const = default;
};

// Parses "I/N" (0 <= I < N, 1 <= N <= 4096); throws InputError saying what is wrong.
[[nodiscard]] ShardSpec parse_shard(const std::string& text);

// The workloads that must be measured on one device: a decode shape point with all its context
// lengths (its crossover is read across them), or one prefill or held-out workload.
[[nodiscard]] std::string shard_group_key(const Workload& w);

// A workload's estimated sweep cost in byte-equivalents: the KV bytes it reads plus its flops at
// a nominal balance, plus a fixed cost per launch, for each of its `configs` configurations.
[[nodiscard]] double workload_cost(const Workload& w, int configs);

// The shard of every workload (same order as `workloads`): groups (shard_group_key) are placed
// by greedy longest-processing-time on their summed cost, largest first, each on the least
// loaded shard (ties: key order, lower shard). Deterministic for a given plan.
[[nodiscard]] std::vector<int> assign_shards(const std::vector<Workload>& workloads,
                                             const std::vector<int>& configs, int count);

} // namespace attn
