// Tests of the reference rules (vLLM CUDA's and the seed engine's, as SPEC.md states them, and
// vLLM CPU's), of the one list of rules the table and the report share and which of them a
// table's kernels replace, and of the regret charged when a chosen partition or configuration
// was not measured (the kernel's own splits included).
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
  // vLLM CUDA: v1 when ctx <= 8192 and (one partition or num_seqs * num_heads > 512).
  p.batch = 1;
  p.context_len = 512;
  EXPECT_FALSE(vllm_cuda_rule(p).v2);
  p.context_len = 513;
  EXPECT_TRUE(vllm_cuda_rule(p).v2);
  p.batch = 17; // 17 * 32 = 544 > 512
  EXPECT_FALSE(vllm_cuda_rule(p).v2);
  p.context_len = 8193;
  EXPECT_TRUE(vllm_cuda_rule(p).v2);
  EXPECT_EQ(vllm_cuda_rule(p).partition, 512);
  // Seed engine: v2 when num_kv_heads * ceil(ctx / 512) > 32.
  p.context_len = 4 * 512; // 8 * 4 = 32: not above
  EXPECT_FALSE(seed_engine_rule(p).v2);
  p.context_len = 4 * 512 + 1; // 8 * 5 = 40
  EXPECT_TRUE(seed_engine_rule(p).v2);
}

// vLLM CPU splits the keys (v2) whatever the batch, context and heads, as shipped
// (VLLM_CPU_ATTN_SPLIT_KV defaults to 1), and leaves the splits to its scheduler.
TEST(ReferenceRules, VllmCpuSplitsAlwaysAndLetsTheKernelChooseTheSplits) {
  DecodePoint p;
  for (int batch : {1, 64, 512}) {
    for (int ctx : {1, 16, 512, 100000}) {
      p.batch = batch;
      p.context_len = ctx;
      EXPECT_TRUE(vllm_cpu_rule(p).v2) << batch << " " << ctx;
      EXPECT_EQ(vllm_cpu_rule(p).partition, kKernelSplits);
    }
  }
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
  EXPECT_EQ(ids, (std::vector<std::string>{"fitted_rule", "table_lookup", "vllm_cuda", "vllm_cpu",
                                           "seed_engine"}));
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
  EXPECT_TRUE(family_rule(engine_rules()[2], always_v2)(p).v2);  // vllm_cuda
  EXPECT_TRUE(family_rule(engine_rules()[3], always_v2)(p).v2);  // vllm_cpu
  EXPECT_FALSE(family_rule(engine_rules()[4], always_v2)(p).v2); // seed_engine
  EXPECT_FALSE(family_rule(engine_rules()[0], Rule())) << "no fitted rule, no decision";
}

// A kernel set names the rule it replaces as the plugin ABI spells it; tables record that name
// and the report and `table show` list that rule first among the engines', as its own.
TEST(EngineRules, AKernelSetNamesTheRuleItReplaces) {
  for (const EngineRule& r : engine_rules()) {
    EXPECT_EQ(r.declared.empty(), r.kind != RuleKind::hard_coded) << r.id;
    EXPECT_EQ(r.summary.empty(), r.kind != RuleKind::hard_coded) << r.id;
    if (!r.declared.empty()) {
      EXPECT_EQ(engine_rule_declared(r.declared), &r) << r.id;
    }
  }
  EXPECT_EQ(engine_rule_declared("vllm-cuda")->id, "vllm_cuda");
  EXPECT_EQ(engine_rule_declared("vllm-cpu")->id, "vllm_cpu");
  EXPECT_EQ(engine_rule_declared("seed")->id, "seed_engine");
  EXPECT_EQ(engine_rule_declared(""), nullptr);
  EXPECT_EQ(engine_rule_declared("sglang"), nullptr);
  EXPECT_EQ(engine_rule_declared("vllm"), nullptr) << "not every vLLM's rule is CUDA's";

  nlohmann::json t = {{"provenance", {{"device", {{"name", "x"}}}}}};
  EXPECT_EQ(own_engine_rule(t), nullptr) << "made before kernel sets named their rule";
  t["provenance"]["kernels"] = {{"source", "built-in"}, {"name", "attn-tune"}};
  EXPECT_EQ(own_engine_rule(t), nullptr);
  t["provenance"]["kernels"]["engine_rule"] = "";
  EXPECT_EQ(own_engine_rule(t), nullptr);
  t["provenance"]["kernels"]["engine_rule"] = "vllm-cpu";
  const EngineRule* own = own_engine_rule(t);
  ASSERT_NE(own, nullptr);
  EXPECT_EQ(own->id, "vllm_cpu");

  std::vector<std::string> order;
  for (const EngineRule* r : rules_listed(own)) {
    order.push_back(r->id);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"fitted_rule", "table_lookup", "vllm_cpu", "vllm_cuda",
                                             "seed_engine"}));
  order.clear();
  for (const EngineRule* r : rules_listed(nullptr)) {
    order.push_back(r->id);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"fitted_rule", "table_lookup", "vllm_cuda", "vllm_cpu",
                                             "seed_engine"}));
  EXPECT_EQ(rule_label(*own, own), "vLLM CPU (the kernel set's own rule)");
  EXPECT_EQ(rule_label(*engine_rule_declared("seed"), own), "seed engine");
}

// Tables before version 3 priced vLLM's CUDA rule as "vllm": readers find it under either key.
TEST(EngineRules, StoredRegretReadsTheOldKeyOfVllmCuda) {
  const EngineRule& cuda = *engine_rule_declared("vllm-cuda");
  const EngineRule& cpu = *engine_rule_declared("vllm-cpu");
  const nlohmann::json v2 = {{"vllm", {{"mean", 0.25}}}, {"seed_engine", {{"mean", 0.5}}}};
  ASSERT_NE(stored_regret(v2, cuda), nullptr);
  EXPECT_EQ((*stored_regret(v2, cuda))["mean"], 0.25);
  EXPECT_EQ(stored_regret(v2, cpu), nullptr) << "not priced before version 3";
  const nlohmann::json v3 = {{"vllm_cuda", {{"mean", 0.125}}}, {"vllm_cpu", {{"mean", 0.0}}}};
  EXPECT_EQ((*stored_regret(v3, cuda))["mean"], 0.125);
  EXPECT_EQ((*stored_regret(v3, cpu))["mean"], 0.0);
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

// A v2 that chooses its own splits is recorded as such (kKernelSplits), never as a partition:
// a rule that leaves the splits to the kernel is charged the fastest v2 measured (its v1/v2
// decision alone), and a fixed partition where only the kernel's own splits ran is charged those.
TEST(Regret, ChargesTheKernelsOwnSplitsAndFixedPartitionsEachOther) {
  DecodePoint own;
  own.context_len = 4096;
  own.v1_s = 2.0;
  own.v2_by_partition = {{kKernelSplits, 1.5}};
  own.best_s = 1.5;
  EXPECT_EQ(own.v2_time(kKernelSplits), 1.5);
  EXPECT_EQ(own.v2_time(512), 1.5) << "the only v2 there is";
  EXPECT_DOUBLE_EQ(regret_of({own}, vllm_cpu_rule).mean, 0.0);
  EXPECT_DOUBLE_EQ(regret_of({own}, vllm_cuda_rule).mean, 0.0);             // v2 at 4096, batch 1
  EXPECT_DOUBLE_EQ(regret_of({own}, seed_engine_rule).mean, 2.0 / 1.5 - 1); // v1
  EXPECT_DOUBLE_EQ(regret_of_configs({own},
                                     [](std::size_t) {
                                       return KernelConfig{Family::decode_v2, {{"split", 1}}};
                                     })
                       .mean,
                   0.0);

  DecodePoint fixed;
  fixed.context_len = 4096;
  fixed.v1_s = 2.0;
  fixed.v2_by_partition = {{256, 1.25}, {1024, 1.0}};
  fixed.best_s = 1.0;
  EXPECT_EQ(fixed.v2_time(kKernelSplits), 1.0) << "the fastest measured split";
  EXPECT_EQ(fixed.v2_time(512), 1.25) << "the nearest fixed partition, never the own splits";

  DecodePoint both = fixed;
  both.v2_by_partition[kKernelSplits] = 1.75;
  EXPECT_EQ(both.v2_time(kKernelSplits), 1.75);
  EXPECT_EQ(both.v2_time(2048), 1.0);
  EXPECT_EQ(v2_partition(KernelConfig{Family::decode_v2, {{"split", 0}}}), kKernelSplits);
  EXPECT_EQ(v2_partition(KernelConfig{Family::decode_v2, {{"partition", 384}}}), 384);
  EXPECT_EQ(partition_words(kKernelSplits), "the kernel chooses its splits");
  EXPECT_EQ(partition_words(512), "partition 512");
  EXPECT_EQ(v2_words(kKernelSplits), "v2, the kernel chooses its splits");
  EXPECT_EQ(v2_words(256), "v2 partition 256");
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
