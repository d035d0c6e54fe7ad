// Tests of sweep sharding: --shard parsing, and over every shipped profile that the shards of
// any split never overlap, together cover the plan, keep a decode point's context lengths
// together, are deterministic and balanced by the cost estimate.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "src/backends/registry.h"
#include "src/model/errors.h"
#include "src/tuning/profile.h"
#include "src/tuning/results_file.h"
#include "src/tuning/shard.h"
#include "src/tuning/workloads.h"

namespace attn {
namespace {

TEST(Shard, ParsesIOfNCountedFromZero) {
  EXPECT_EQ(parse_shard("0/1"), (ShardSpec{.index = 0, .count = 1}));
  EXPECT_EQ(parse_shard("3/4"), (ShardSpec{.index = 3, .count = 4}));
  EXPECT_EQ(parse_shard("3/4").text(), "3/4");
  EXPECT_FALSE(parse_shard("0/1").sharded());
  EXPECT_TRUE(parse_shard("0/2").sharded());
}

TEST(Shard, RefusesBadValuesWithOneLine) {
  for (const char* bad :
       {"", "1", "4/4", "5/4", "0/0", "-1/4", "1/-4", "a/b", "1/4/2", " 1/4", "1.0/4", "0/99999"}) {
    try {
      (void)parse_shard(bad);
      ADD_FAILURE() << "accepted --shard '" << bad << "'";
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--shard '" + std::string(bad) + "'"), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
}

TEST(Shard, ShippedProfilesSplitIntoDisjointCoveringBalancedShards) {
  auto be = make_backend("cpu", {.threads = 1, .kernels = ""});
  for (const std::string& name : builtin_profile_names()) {
    const Profile prof = load_profile(name);
    const std::vector<Workload> ws = expand_workloads(prof);
    std::vector<int> counts;
    std::set<std::string> plan;
    double max_group = 0;
    std::map<std::string, double> group_cost;
    for (const auto& w : ws) {
      const auto cs = configs_for(prof, *be, w);
      counts.push_back(int(cs.size()));
      for (const auto& c : cs) {
        plan.insert(record_key(w.key(), c.key()));
      }
      group_cost[shard_group_key(w)] += workload_cost(w, int(cs.size()));
    }
    double total_cost = 0;
    for (const auto& [k, c] : group_cost) {
      max_group = std::max(max_group, c);
      total_cost += c;
    }
    for (int n : {1, 2, 3, 4, 7, 16}) {
      const std::vector<int> shard = assign_shards(ws, counts, n);
      ASSERT_EQ(shard.size(), ws.size());
      EXPECT_EQ(shard, assign_shards(ws, counts, n)) << name << " " << n << ": not deterministic";
      std::set<std::string> seen;
      std::vector<double> load(std::size_t(n), 0.0);
      std::map<std::string, int> group_shard;
      for (std::size_t i = 0; i < ws.size(); ++i) {
        ASSERT_GE(shard[i], 0);
        ASSERT_LT(shard[i], n);
        load[std::size_t(shard[i])] += workload_cost(ws[i], counts[i]);
        // A decode point's context lengths all go to one shard.
        const auto [it, fresh] = group_shard.emplace(shard_group_key(ws[i]), shard[i]);
        EXPECT_EQ(it->second, shard[i]) << name << " " << n << ": " << ws[i].key();
        for (const auto& c : configs_for(prof, *be, ws[i])) {
          EXPECT_TRUE(seen.insert(record_key(ws[i].key(), c.key())).second)
              << name << ": " << ws[i].key() << " " << c.key() << " in two shards";
        }
      }
      EXPECT_EQ(seen, plan) << name << " " << n << ": the shards do not cover the plan";
      // Greedy LPT: no shard exceeds the mean by more than the largest group.
      const double worst = *std::max_element(load.begin(), load.end());
      EXPECT_LE(worst, total_cost / n + max_group + 1e-6 * total_cost) << name << " " << n;
      if (int(group_cost.size()) >= n) {
        EXPECT_GT(*std::min_element(load.begin(), load.end()), 0.0)
            << name << " " << n << ": an empty shard although there are enough groups";
      }
    }
  }
}

TEST(Shard, CostGrowsWithTheWork) {
  Workload a;
  a.params = {.num_heads = 8,
              .num_kv_heads = 2,
              .head_dim = 128,
              .block_size = 16,
              .dtype = DType::f16,
              .causal = true,
              .window_left = -1,
              .window_right = -1,
              .softcap = 0.0,
              .scale = std::nullopt};
  a.batch = 1;
  a.context_len = 512;
  Workload b = a;
  b.context_len = 4096;
  EXPECT_LT(workload_cost(a, 4), workload_cost(b, 4));
  EXPECT_LT(workload_cost(a, 4), workload_cost(a, 8));
  EXPECT_EQ(shard_group_key(a), shard_group_key(b)); // one decode point
  b.held_out = true;
  EXPECT_NE(shard_group_key(a), shard_group_key(b));
}

} // namespace
} // namespace attn
