// Tests of the reference rules (vLLM's and the seed engine's, as SPEC.md states them), of the one
// list of rules the table and the report share, and of the regret charged when a chosen
// partition or configuration was not measured.
#include <gtest/gtest.h>

#include <cstddef>
#include <set>
#include <string>

#include "src/tuning/regret.h"

namespace attn {
namespace {

TEST(ReferenceRules, FollowSpecMd) {
  DecodePoint p;
  p.num_heads = 32;
  p.num_kv_heads = 8;
  // vLLM: v1 when ctx <= 8192 and (one partition or num_seqs * num_heads > 512).
  p.batch = 1;
  p.context_len = 512;
  EXPECT_FALSE(vllm_rule(p).v2);
  p.context_len = 513;
  EXPECT_TRUE(vllm_rule(p).v2);
  p.batch = 17; // 17 * 32 = 544 > 512
  EXPECT_FALSE(vllm_rule(p).v2);
  p.context_len = 8193;
  EXPECT_TRUE(vllm_rule(p).v2);
  EXPECT_EQ(vllm_rule(p).partition, 512);
  // Seed engine: v2 when num_kv_heads * ceil(ctx / 512) > 32.
  p.context_len = 4 * 512; // 8 * 4 = 32: not above
  EXPECT_FALSE(seed_engine_rule(p).v2);
  p.context_len = 4 * 512 + 1; // 8 * 5 = 40
  EXPECT_TRUE(seed_engine_rule(p).v2);
}

TEST(EngineRules, OneEntryPerRuleThatDecidesAsItsKindSays) {
  std::vector<std::string> ids;
  for (const EngineRule& r : engine_rules()) {
    ids.push_back(r.id);
    EXPECT_FALSE(r.name.empty()) << r.id;
    EXPECT_EQ(r.choose != nullptr, r.kind == RuleKind::hard_coded) << r.id;
    EXPECT_EQ(r.picks_family(), r.kind != RuleKind::table_lookup) << r.id;
  }
  // The table's `regret` keys; the report lists them in this order.
  EXPECT_EQ(ids, (std::vector<std::string>{"fitted_rule", "table_lookup", "vllm", "seed_engine"}));
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), ids.size());

  const Rule always_v2 = [](const DecodePoint&) { return RuleChoice{true, 256}; };
  DecodePoint p;
  p.batch = 1;
  p.num_heads = 32;
  p.num_kv_heads = 8;
  p.context_len = 2048; // vLLM: v2; the seed engine: 8 * 4 = 32, not above 32: v1
  for (const EngineRule& r : engine_rules()) {
    const Rule rule = family_rule(r, always_v2);
    if (r.kind == RuleKind::table_lookup) {
      EXPECT_FALSE(rule) << "the lookup picks configurations, not families";
      continue;
    }
    ASSERT_TRUE(rule) << r.id;
    const RuleChoice want = r.kind == RuleKind::fitted ? always_v2(p) : r.choose(p);
    EXPECT_EQ(rule(p).v2, want.v2) << r.id;
    EXPECT_EQ(rule(p).partition, want.partition) << r.id;
  }
  EXPECT_TRUE(family_rule(engine_rules()[2], always_v2)(p).v2);  // vllm
  EXPECT_FALSE(family_rule(engine_rules()[3], always_v2)(p).v2); // seed_engine
  EXPECT_FALSE(family_rule(engine_rules()[0], Rule())) << "no fitted rule, no decision";
}

TEST(EngineRules, TheFittedRuleLaunchesItsPartitionWhereTheFitSaysV2) {
  RuleFit fit;
  fit.tiles = TilesDef::kv_heads_parts;
  fit.k = 1.0;
  fit.sm_count = 16;
  fit.partition = 1024;
  DecodePoint p;
  p.num_kv_heads = 8;
  p.context_len = 2 * 1024; // 8 * 2 = 16 tiles: not above 16
  const Rule rule = fitted_rule(fit);
  EXPECT_FALSE(rule(p).v2);
  p.context_len = 2 * 1024 + 1; // 8 * 3 = 24 tiles
  EXPECT_TRUE(rule(p).v2);
  EXPECT_EQ(rule(p).partition, 1024);
}

TEST(Regret, ChargesMissingPartitionsTheNearestMeasuredOne) {
  DecodePoint p;
  p.context_len = 4096;
  p.v1_s = 2.0;
  p.v2_by_partition = {{256, 1.0}, {1024, 3.0}};
  p.best_s = 1.0;
  EXPECT_EQ(p.v2_time(512), 1.0); // 256 and 1024 are equally far in log2: the smaller wins
  EXPECT_EQ(p.v2_time(2048), 3.0);
  const Regret r = regret_of({p}, seed_engine_rule); // kvh 1 * 8 partitions: not > 32 -> v1
  EXPECT_DOUBLE_EQ(r.mean, 1.0);
  const Regret rc = regret_of_configs({p}, [](std::size_t) {
    return KernelConfig{Family::decode_v2, {{"partition", 1024}}};
  });
  EXPECT_DOUBLE_EQ(rc.worst, 2.0);
}

TEST(Regret, CountsPointsBeyondTheirMeasuredNoise) {
  DecodePoint p;
  p.context_len = 512;
  p.v1_s = 1.25;
  p.v2_by_partition = {{512, 1.0}};
  p.best_s = 1.0;
  p.noise = 0.25; // v1 is 25% slower: exactly at the noise, not beyond it
  const Rule always_v1 = [](const DecodePoint&) { return RuleChoice{false, 512}; };
  Regret r = regret_of({p}, always_v1);
  EXPECT_DOUBLE_EQ(r.worst, 0.25);
  EXPECT_EQ(r.beyond_noise, 0);
  p.noise = 0.125;
  r = regret_of({p}, always_v1);
  EXPECT_EQ(r.beyond_noise, 1);
  EXPECT_EQ(r.to_json()["beyond_noise"], 1);
  r = regret_of_configs({p}, [](std::size_t) { return KernelConfig{Family::decode_v1, {}}; });
  EXPECT_EQ(r.beyond_noise, 1);
  EXPECT_EQ(regret_of({p},
                      [](const DecodePoint&) {
                        return RuleChoice{true, 512};
                      })
                .beyond_noise,
            0);
}

} // namespace
} // namespace attn
