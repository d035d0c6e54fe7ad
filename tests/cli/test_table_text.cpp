// Tests of the text `attn-tune table show` prints: the device, each shape point's v1/v2 decision
// with its noise calls, the fitted rule, the engine rule the kernels replace and the regret
// against it, on tables built from synthetic records.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "src/cli/table_text.h"
#include "src/tuning/threshold_table.h"
#include "tests/tuning/table_fixtures.h"

namespace attn {
namespace {

using fixtures::rec;
using fixtures::spread_rec;
using nlohmann::json;

json provenance() {
  return {{"device",
           {{"name", "Synthetic GPU"},
            {"id", "cuda:0"},
            {"sm_count", 16},
            {"compute_capability", "9.0"}}},
          {"profile", {{"name", "p"}, {"hash", "0123"}}},
          {"tool", {{"version", "0.1.0"}, {"git_hash", "abc"}}},
          {"kernel_sources_sha256", std::string(64, 'f')},
          {"created_utc", "2026-01-01T00:00:00Z"},
          {"timing_method", "synthetic"}};
}

// One point, batch 1: v1 twice as fast at 512, `v2` twice as fast at 4096, so the switch lies
// halfway in log length: at sqrt(512 * 4096) = 1448.2, rounded up.
std::vector<MeasurementRecord> v2_from_1449(const KernelConfig& v2) {
  const KernelConfig v1{Family::decode_v1, {}};
  return {rec(1, 512, 8, v1, 1.0), rec(1, 512, 8, v2, 2.0), rec(1, 4096, 8, v1, 4.0),
          rec(1, 4096, 8, v2, 2.0)};
}

// Whether `text` holds `part`; the text is the failure message.
::testing::AssertionResult holds(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no \"" << part << "\" in\n" << text;
}

TEST(ThresholdTable, ShowExplainsTheTable) {
  const std::vector<MeasurementRecord> rs = v2_from_1449({Family::decode_v2, {{"partition", 512}}});
  const std::string text = cli::describe_table(build_threshold_table(rs, provenance(), 16));
  EXPECT_NE(text.find("Synthetic GPU (cuda:0), 16 SMs"), std::string::npos) << text;
  EXPECT_NE(text.find("fp16 d=128 bs=16 kvh=8 gqa=4 batch=1: v2 from ctx 1449"), std::string::npos)
      << text;
  EXPECT_NE(text.find("fitted rule: use v2 (partition 512) when"), std::string::npos) << text;
}

// A held-out prefill point is marked as such among the prefill points, as decode's are apart.
TEST(ThresholdTable, ShowMarksHeldOutPrefillPoints) {
  json t = build_threshold_table(v2_from_1449({Family::decode_v2, {{"partition", 512}}}),
                                 provenance(), 16);
  const json point = {
      {"dtype", "fp16"},
      {"head_dim", 64},
      {"num_heads", 2},
      {"num_kv_heads", 1},
      {"batch", 1},
      {"q_len", 100},
      {"k_len", 100},
      {"best", {{"config", {{"key", "prefill[q_tile=64]"}}}, {"median_s", 3.5e-5}}}};
  t["prefill"] = json::array({point, point});
  t["prefill"][1]["held_out"] = true;
  const std::string text = cli::describe_table(t);
  EXPECT_TRUE(holds(text, "q=100 k=100: 35.0 us prefill[q_tile=64]\n"));
  EXPECT_TRUE(holds(text, "q=100 k=100: 35.0 us prefill[q_tile=64] (held out)\n"));
}

TEST(ThresholdTable, ShowSaysWhenAMergedTableIsIncomplete) {
  const KernelConfig v1{Family::decode_v1, {}};
  const KernelConfig v2{Family::decode_v2, {{"partition", 512}}};
  std::vector<MeasurementRecord> rs = {rec(1, 512, 8, v1, 1.0), rec(1, 512, 8, v2, 2.0)};
  json pv = provenance();
  pv["merge"] = {{"shard_count", 3},
                 {"shards",
                  {{{"shard", "0/3"}, {"measurements", 10}, {"expected", 10}, {"complete", true}},
                   {{"shard", "1/3"}, {"measurements", 4}, {"expected", 9}, {"complete", false}}}},
                 {"missing_shards", {2}},
                 {"complete", false},
                 {"duplicates", 0}};
  const std::string partial = cli::describe_table(build_threshold_table(rs, pv, 16));
  EXPECT_NE(partial.find("merged:   2 shard folders of 3 shards\nINCOMPLETE: merged with "
                         "--partial; its decisions rest on part of the sweep: shard 2/3 has no "
                         "folder; shard 1/3 has 4 of 9 measurements;"),
            std::string::npos)
      << partial;

  pv["merge"]["shards"][1]["complete"] = true;
  pv["merge"]["shards"].push_back(
      {{"shard", "2/3"}, {"measurements", 5}, {"expected", 5}, {"complete", true}});
  pv["merge"]["missing_shards"] = json::array();
  pv["merge"]["complete"] = true;
  const std::string whole = cli::describe_table(build_threshold_table(rs, pv, 16));
  EXPECT_NE(whole.find("merged:   3 shard folders of 3 shards, complete\n"), std::string::npos)
      << whole;
  EXPECT_EQ(whole.find("INCOMPLETE"), std::string::npos) << whole;

  json one = provenance();
  one["shard"] = {{"index", 1}, {"count", 4}};
  const std::string shard = cli::describe_table(build_threshold_table(rs, one, 16));
  EXPECT_NE(shard.find("shard:    1/4 of a sharded sweep"), std::string::npos) << shard;
}

TEST(ThresholdTable, ShowSpellsOutIntervalsAndNoiseCalls) {
  const KernelConfig v1{Family::decode_v1, {}};
  const KernelConfig v2{Family::decode_v2, {{"partition", 512}}};
  // v1, then v2 beyond noise from 512, within noise at 2048, v1 beyond noise from 8192. The
  // switches: halfway between 128 and 512 (each family twice as fast at one of them), and right
  // after 2048, where v1's median is already the lower one.
  std::vector<MeasurementRecord> rs = {
      spread_rec(2, 128, 8, v1, 1e-6, 0.01e-6),  spread_rec(2, 128, 8, v2, 2e-6, 0.01e-6),
      spread_rec(2, 512, 8, v1, 4e-6, 0.01e-6),  spread_rec(2, 512, 8, v2, 2e-6, 0.01e-6),
      spread_rec(2, 2048, 8, v1, 8e-6, 0.1e-6),  spread_rec(2, 2048, 8, v2, 8.16e-6, 0.2e-6),
      spread_rec(2, 8192, 8, v1, 10e-6, 0.1e-6), spread_rec(2, 8192, 8, v2, 20e-6, 0.1e-6)};
  const std::string text = cli::describe_table(build_threshold_table(rs, provenance(), 16));
  EXPECT_NE(text.find("schema attn-tune/threshold-table v5"), std::string::npos) << text;
  EXPECT_NE(text.find("kvh=8 gqa=4 batch=2: v1 below ctx 256, v2 from 256, v1 from 2049"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ctx 512: v1 4.0 us, v2 2.0 us, best decode_v2[partition=512]; v2 faster by "
                      "100.0% (noise 0.5%)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ctx 2048: v1 8.0 us, v2 8.2 us, best decode_v1[]; within noise (2.0% <= "
                      "2.5%)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("table lookup beyond the measured noise at 0 of them"), std::string::npos)
      << text;
}

TEST(ThresholdTable, ShowListsNoisyDecisionsWithTheRemedy) {
  const KernelConfig v1{Family::decode_v1, {}};
  const KernelConfig v2{Family::decode_v2, {{"partition", 512}}};
  // v1 beyond noise at 512, v2's median 1% lower within 5% noise at 2048, v2 beyond at 8192.
  std::vector<MeasurementRecord> rs = {
      spread_rec(2, 512, 8, v1, 1e-6, 0.01e-6),    spread_rec(2, 512, 8, v2, 2e-6, 0.01e-6),
      spread_rec(2, 2048, 8, v1, 4.04e-6, 0.2e-6), spread_rec(2, 2048, 8, v2, 4e-6, 0.1e-6),
      spread_rec(2, 8192, 8, v1, 20e-6, 0.1e-6),   spread_rec(2, 8192, 8, v2, 10e-6, 0.1e-6)};
  json t = build_threshold_table(rs, provenance(), 16);
  std::string text = cli::describe_table(t);
  EXPECT_NE(text.find("noisy decisions: 1 decision rests on timings within noise"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("1 next to a switch between v1 and v2, which could move; 1 keeps the family "
                      "with the slower median"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  fp16 d=128 bs=16 kvh=8 gqa=4 batch=2 ctx 2048: v1 carried from ctx 512, "
                      "though v2's median is 1.0% faster (within the noise of 5.0%); the switch "
                      "to v2 before ctx 8192 could lie this early\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("re-time them with 4x the repetitions: attn-tune sweep --resume "
                      "--remeasure-noisy"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("or sweep on a quieter machine"), std::string::npos) << text;

  // Already re-timed and still within noise: the remedy says more repetitions did not help.
  t["decode"][0]["noisy_decisions"][0]["remeasured"] = true;
  text = cli::describe_table(t);
  EXPECT_NE(text.find("; still within noise after --remeasure-noisy\n"), std::string::npos) << text;
  EXPECT_NE(text.find("all were re-timed with 4x the repetitions already"), std::string::npos)
      << text;

  // Clear margins: the table says none; a table made before the list says nothing of it.
  rs[2] = spread_rec(2, 2048, 8, v1, 8e-6, 0.1e-6);
  t = build_threshold_table(rs, provenance(), 16);
  text = cli::describe_table(t);
  EXPECT_NE(text.find("noisy decisions: none: no switch between v1 and v2 borders or hides in "
                      "timings within noise"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("--remeasure-noisy"), std::string::npos) << text;
  for (auto& p : t["decode"]) {
    p.erase("noisy_decisions");
  }
  text = cli::describe_table(t);
  EXPECT_EQ(text.find("noisy decisions"), std::string::npos) << text;
  EXPECT_FALSE(cli::noisy_decisions_of(t).listed);
}

// The kernels name the rule they replace: table show says which, lists it first among the
// engines' rules as the kernel set's own, and calls vLLM's CUDA rule vllm_cuda, never "vllm".
TEST(ThresholdTable, ShowNamesTheKernelSetsOwnRule) {
  const std::vector<MeasurementRecord> rs = v2_from_1449({Family::decode_v2, {{"partition", 512}}});
  json pv = provenance();
  pv["kernels"] = {{"source", "built-in"}, {"name", "attn-tune"}, {"engine_rule", "vllm-cpu"}};
  std::string text = cli::describe_table(build_threshold_table(rs, pv, 16));
  EXPECT_TRUE(holds(text, "engine:   the kernels replace vLLM CPU's rule (vllm-cpu: v2 (split-KV) "
                          "always unless VLLM_CPU_ATTN_SPLIT_KV=0"));
  EXPECT_TRUE(holds(text, "table_lookup 0.0%/0.0% vllm_cpu (the kernel set's own rule) "
                          "50.0%/100.0% vllm_cuda "));
  EXPECT_FALSE(holds(text, " vllm "));

  pv["kernels"]["engine_rule"] = "";
  text = cli::describe_table(build_threshold_table(rs, pv, 16));
  EXPECT_TRUE(holds(text, "engine:   the kernels name no engine rule they replace"));
  EXPECT_FALSE(holds(text, "own rule"));
  EXPECT_TRUE(holds(text, "table_lookup 0.0%/0.0% vllm_cuda "));

  pv.erase("kernels"); // made before kernel sets named their rule: no engine line
  EXPECT_FALSE(holds(cli::describe_table(build_threshold_table(rs, pv, 16)), "engine:"));
}

// A v2 without a partition: the rule and every measured v2 say the kernel chooses its splits.
TEST(ThresholdTable, ShowSaysTheKernelChoosesItsSplits) {
  const std::string text = cli::describe_table(
      build_threshold_table(v2_from_1449({Family::decode_v2, {}}), provenance(), 16));
  EXPECT_TRUE(holds(text, "fitted rule: use v2 (the kernel chooses its splits) when "
                          "batch*num_kv_heads*context_len > "));
  EXPECT_TRUE(holds(text, "ctx 4096: v1 4000000.0 us, v2 2000000.0 us (the kernel chooses its "
                          "splits), best decode_v2[]"));
  EXPECT_FALSE(holds(text, "partition 512"));
}

// Version 2 priced vLLM's CUDA rule as "vllm": shown under its version-3 name.
TEST(ThresholdTable, ShowReadsVersion2Tables) {
  json t = json::parse(
      std::ifstream(std::string(ATTN_SOURCE_DIR) + "/python/testdata/synthetic_table_v2.json"));
  const std::string text = cli::describe_table(t);
  EXPECT_TRUE(holds(text, "schema attn-tune/threshold-table v2"));
  EXPECT_TRUE(holds(text, " vllm_cuda 3.8%/30.0% seed_engine "));
  EXPECT_FALSE(holds(text, "vllm_cpu")) << "not priced in version 2";
}

TEST(ThresholdTable, ShowReadsVersion1Tables) {
  json t = json::parse(
      std::ifstream(std::string(ATTN_SOURCE_DIR) + "/python/testdata/synthetic_table_v1.json"));
  const std::string text = cli::describe_table(t);
  EXPECT_NE(text.find("schema attn-tune/threshold-table v1"), std::string::npos) << text;
  EXPECT_NE(text.find("becomes faster than v1 and stays faster"), std::string::npos) << text;
  EXPECT_NE(text.find("kvh=8 gqa=4 batch=64: v2 never"), std::string::npos) << text;
  EXPECT_EQ(text.find("noise"), std::string::npos) << "version 1 has no noise calls\n" << text;
}

} // namespace
} // namespace attn
