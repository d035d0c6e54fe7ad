// Tests of the assembled threshold table on synthetic records with known answers: shape points
// and their crossovers, best configurations, held-out points, the fitted rule and the regret,
// and that the table's own lookup stays within the measured noise at the sweep's points.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <tuple>

#include "include/attn_tune/threshold_table_reader.hpp"
#include "src/tuning/threshold_table.h"
#include "tests/tuning/table_fixtures.h"

namespace attn {
namespace {

using fixtures::spread_rec;
using nlohmann::json;

const KernelConfig kV1{Family::decode_v1, {}};
const KernelConfig kV2{Family::decode_v2, {{"partition", 512}}};

attn_tune::Query query_at(const json& point, int ctx) {
  attn_tune::Query q;
  q.batch = point["batch"];
  q.context_len = ctx;
  q.num_heads = point["num_heads"];
  q.num_kv_heads = point["num_kv_heads"];
  q.head_dim = point["head_dim"];
  q.block_size = point["block_size"];
  q.dtype = point["dtype"];
  return q;
}

// The slowdown of the reader's choice at every measured length of every decode point, checked
// against that length's recorded noise (0 where a family is missing: the choice must be exact).
void expect_lookup_within_noise(const json& t, const std::string& what) {
  const attn_tune::ThresholdTableReader reader(t);
  for (const auto& p : t["decode"]) {
    for (const auto& m : p["measured"]) {
      const int ctx = m["context_len"];
      const auto c = reader.lookup(query_at(p, ctx));
      EXPECT_TRUE(c.exact_point);
      const char* slot = c.family == "decode_v2" ? "v2" : "v1";
      ASSERT_FALSE(m[slot].is_null()) << what;
      EXPECT_EQ(c.config_key, m[slot]["config"]["key"]) << what;
      const double regret =
          m[slot]["median_s"].get<double>() / m["best"]["median_s"].get<double>() - 1;
      const double noise = m.value("noise", 0.0);
      EXPECT_LE(regret, noise * (1 + 1e-9) + 1e-12)
          << what << ": batch " << p["batch"] << " kvh " << p["num_kv_heads"] << " ctx " << ctx
          << " picks " << c.config_key;
      if (regret > 0) {
        EXPECT_TRUE(m["within_noise"].get<bool>()) << what << " ctx " << ctx;
      }
    }
  }
  EXPECT_EQ(t["regret"]["sweep"]["table_lookup"]["beyond_noise"], 0) << what;
}

// A shard that drew only held-out decode points (and prefill) has a table without decode points:
// its held-out regret names what it can and looks nothing up (it ended in "threshold table has
// no decode points", exit 4).
TEST(ThresholdTable, HeldOutPointsWithoutGridPointsBuildATable) {
  std::vector<MeasurementRecord> held;
  for (const MeasurementRecord& r : fixtures::two_points_and_held_out()) {
    if (r.workload.held_out) {
      held.push_back(r);
    }
  }
  ASSERT_EQ(held.size(), 2u);
  const json t = build_threshold_table(held, {{"device", {{"name", "synthetic"}}}}, 16);
  EXPECT_TRUE(t["decode"].empty());
  EXPECT_EQ(t["regret"]["held_out"]["table_lookup"]["points"], 0);
  EXPECT_EQ(t["regret"]["held_out"]["vllm_cuda"]["points"], 1);
}

TEST(ThresholdTable, BuildsPointsBestConfigsAndRegret) {
  const json t = build_threshold_table(fixtures::two_points_and_held_out(),
                                       {{"device", {{"name", "synthetic"}}}}, 16);
  EXPECT_EQ(t["schema"], "attn-tune/threshold-table");
  EXPECT_EQ(t["version"], 5);
  EXPECT_EQ(t["measurement_counts"]["failed"], 1);
  ASSERT_EQ(t["decode"].size(), 2u);
  const json* b1 = nullptr;
  const json* b64 = nullptr;
  for (const auto& p : t["decode"]) {
    (p["batch"] == 1 ? b1 : b64) = &p;
  }
  ASSERT_TRUE(b1 && b64);
  // v2 is 1.5 times slower at 512 and twice as fast at 2048: log(v2 / v1) crosses zero at
  // 512 * 4^(log 1.5 / log 3) = 854.1.
  EXPECT_EQ((*b1)["v2_from"], 855);
  EXPECT_EQ((*b1)["v2_intervals"], json::parse("[[855, null]]"));
  EXPECT_EQ((*b64)["v2_from"], "never");
  EXPECT_EQ((*b64)["v2_intervals"], json::array());
  // Without recorded spreads only exact ties are within noise; the margins are still recorded.
  EXPECT_FALSE((*b1)["measured"][1]["within_noise"].get<bool>());
  EXPECT_DOUBLE_EQ((*b1)["measured"][1]["margin"].get<double>(), 1.0); // v1 4.0 vs v2 2.0
  EXPECT_DOUBLE_EQ((*b1)["measured"][1]["noise"].get<double>(), 0.0);
  EXPECT_FALSE((*b1)["measured"][1]["v1"].contains("p25_s"));
  EXPECT_EQ((*b1)["gqa_ratio"], 4);
  EXPECT_EQ((*b1)["measured"][1]["best"]["config"]["key"], "decode_v2[partition=256]");
  EXPECT_EQ((*b1)["measured"][2]["best"]["config"]["key"], "decode_v2[partition=512]");
  EXPECT_EQ((*b1)["measured"][2]["v1"]["median_s"], 16.0);
  EXPECT_EQ(t["held_out"].size(), 1u);
  EXPECT_EQ(t["rule"]["points"], 6) << "held-out points stay out of the fit";
  // The table's own lookup is exact at the sweep's points except where the family's best
  // partition changes with context: at batch 1 ctx 2048 lookup takes v2's best there.
  EXPECT_DOUBLE_EQ(t["regret"]["sweep"]["table_lookup"]["worst"].get<double>(), 0.0);
  EXPECT_EQ(t["regret"]["sweep"]["table_lookup"]["points"], 6);
  EXPECT_EQ(t["regret"]["held_out"]["fitted_rule"]["points"], 1);
  // The held-out point (batch 2) takes the batch-1 point's threshold: v2 -> no regret.
  EXPECT_DOUBLE_EQ(t["regret"]["held_out"]["table_lookup"]["mean"].get<double>(), 0.0);
  // vLLM CUDA: batch 1 ctx 512 is one partition -> v1 (best); ctx 2048 with 1 * 32 seqs*heads
  // <= 512 -> v2 at partition 512, 3.0 against 2.0: +50%; everything else picks the best.
  EXPECT_NEAR(t["regret"]["sweep"]["vllm_cuda"]["worst"].get<double>(), 0.5, 1e-12);
  EXPECT_NEAR(t["regret"]["sweep"]["vllm_cuda"]["mean"].get<double>(), 0.5 / 6, 1e-12);
  EXPECT_FALSE(t["regret"]["sweep"].contains("vllm")) << "vLLM's CUDA rule is not every vLLM's";
  // vLLM CPU: v2 everywhere, charged the best v2: batch 1 ctx 512 costs 1.5 against 1.0, and
  // batch 64 pays v2's double time at each of its three lengths.
  EXPECT_NEAR(t["regret"]["sweep"]["vllm_cpu"]["worst"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(t["regret"]["sweep"]["vllm_cpu"]["mean"].get<double>(), (0.5 + 3 * 1.0) / 6, 1e-12);
}

// A decode_v2 without a partition (the kernel chooses its splits) is recorded as measured: its
// configuration has no partition, the fitted rule launches it without one and counts keys, and
// the readers hand it back as such. Nothing says "partition 512".
TEST(ThresholdTable, RecordsAKernelThatChoosesItsSplitsAsSuch) {
  const KernelConfig own{Family::decode_v2, {{"split", 1}}};
  std::vector<MeasurementRecord> rs;
  for (int batch : {1, 8}) {
    for (auto [ctx, t1, t2] : std::vector<std::tuple<int, double, double>>{
             {256, 1.0, 1.4}, {4096, 16.0, 6.0}, {32768, 128.0, 40.0}}) {
      const double v1 = t1 * batch;
      const double v2 = batch == 1 ? t2 : v1 * 1.5; // at batch 8 the splits never pay
      rs.push_back(spread_rec(batch, ctx, 8, kV1, v1, v1 * 0.01));
      rs.push_back(spread_rec(batch, ctx, 8, own, v2, v2 * 0.01));
    }
  }
  const json prov = {{"device", {{"name", "synthetic"}}},
                     {"tool", {{"version", "v"}, {"git_hash", "g"}}},
                     {"kernels",
                      {{"source", "plugin"},
                       {"name", "own-splits"},
                       {"version", "1.0"},
                       {"abi_version", 2},
                       {"library_sha256", "ab"},
                       {"engine_rule", "vllm-cpu"}}},
                     {"kernel_sources_sha256", "ab"},
                     {"profile", {{"name", "p"}, {"hash", "h"}}},
                     {"created_utc", "2026-01-01T00:00:00Z"},
                     {"timing_method", "synthetic"}};
  const json t = build_threshold_table(rs, prov, 16);
  const std::string text = t.dump();
  EXPECT_EQ(text.find("partition=512"), std::string::npos) << text;
  EXPECT_TRUE(t["rule"]["partition"].is_null());
  EXPECT_EQ(t["rule"]["tiles"].get<std::string>().find("partitions"), std::string::npos)
      << t["rule"]["tiles"];
  for (const auto& c : t["rule"]["candidates"]) {
    EXPECT_TRUE(c["partition"].is_null()) << c;
  }
  const json* b1 = nullptr;
  for (const auto& p : t["decode"]) {
    if (p["batch"] == 1) {
      b1 = &p;
    }
  }
  ASSERT_NE(b1, nullptr);
  // 1.4 times slower at 256, 16/6 times faster at 4096: the switch at 519.8, rounded up.
  EXPECT_EQ((*b1)["v2_from"], 520);
  EXPECT_EQ((*b1)["measured"][1]["best"]["config"]["key"], "decode_v2[split=1]");
  EXPECT_FALSE((*b1)["measured"][1]["v2"]["config"]["params"].contains("partition"));
  const attn_tune::ThresholdTableReader reader(t);
  const attn_tune::Choice c = reader.lookup(query_at(*b1, 8192));
  EXPECT_EQ(c.family, "decode_v2");
  EXPECT_EQ(c.partition, 0);
  EXPECT_TRUE(c.kernel_chooses_splits());
  EXPECT_FALSE(reader.lookup(query_at(*b1, 256)).kernel_chooses_splits());
  EXPECT_EQ(reader.engine_rule(), "vllm-cpu");
  // The kernel set's own rule, vLLM CPU's, splits everywhere: right at batch 1 from 4096, 40%
  // slower at batch 1 ctx 256 and 50% slower at every batch-8 length.
  EXPECT_NEAR(t["regret"]["sweep"]["vllm_cpu"]["worst"].get<double>(), 0.5, 1e-12);
  EXPECT_NEAR(t["regret"]["sweep"]["vllm_cpu"]["mean"].get<double>(), (0.4 + 3 * 0.5) / 6, 1e-12);
  EXPECT_DOUBLE_EQ(t["regret"]["sweep"]["table_lookup"]["worst"].get<double>(), 0.0);
  EXPECT_NO_THROW(validate_table(t));
  expect_lookup_within_noise(t, "own splits");
}

// The quick CPU table of issue 11: kvh 8, batch 4, v2 faster by 28% at ctx 64 but slower at 4096.
// A single threshold made that "never" and lost 28% through the table's own lookup at 64.
TEST(ThresholdTable, AV2WinThatEndsIsKeptAsAnInterval) {
  const std::vector<MeasurementRecord> rs = {
      spread_rec(4, 64, 8, kV1, 27.1e-6, 0.3e-6),  spread_rec(4, 64, 8, kV2, 21.2e-6, 0.4e-6),
      spread_rec(4, 512, 8, kV1, 80.0e-6, 1.0e-6), spread_rec(4, 512, 8, kV2, 70.0e-6, 1.0e-6),
      spread_rec(4, 4096, 8, kV1, 500e-6, 5.0e-6), spread_rec(4, 4096, 8, kV2, 620e-6, 6.0e-6)};
  const json t = build_threshold_table(rs, {{"device", {{"name", "synthetic"}}}}, 16);
  ASSERT_EQ(t["decode"].size(), 1u);
  const json& p = t["decode"][0];
  // v2 ends between 512 (v2 by 80/70) and 4096 (v1 by 620/500), where log(v2 / v1) crosses
  // zero: 512 * 8^0.383 = 1135.6.
  EXPECT_EQ(p["v2_intervals"], json::parse("[[1, 1136]]"));
  EXPECT_FALSE(p.contains("v2_from")) << "no single threshold says this";
  const json& m64 = p["measured"][0];
  EXPECT_FALSE(m64["within_noise"].get<bool>());
  EXPECT_NEAR(m64["margin"].get<double>(), 27.1 / 21.2 - 1, 1e-12);
  EXPECT_NEAR(m64["noise"].get<double>(), 0.4 / 21.2, 1e-12);
  EXPECT_NEAR(m64["v2"]["p75_s"].get<double>() - m64["v2"]["p25_s"].get<double>(), 0.4e-6, 1e-15);
  const attn_tune::ThresholdTableReader reader(t);
  EXPECT_EQ(reader.lookup(query_at(p, 64)).family, "decode_v2");
  EXPECT_EQ(reader.lookup(query_at(p, 512)).family, "decode_v2");
  EXPECT_EQ(reader.lookup(query_at(p, 4096)).family, "decode_v1");
  EXPECT_EQ(reader.lookup(query_at(p, 100000)).family, "decode_v1");
  EXPECT_DOUBLE_EQ(t["regret"]["sweep"]["table_lookup"]["worst"].get<double>(), 0.0);
  expect_lookup_within_noise(t, "issue 11 case");
}

// A length where v1 is faster only within the noise does not end v2's run: the lookup there pays
// at most the noise, and the table says so.
TEST(ThresholdTable, AWinWithinNoiseDoesNotFlipTheDecision) {
  const std::vector<MeasurementRecord> rs = {
      spread_rec(1, 512, 8, kV1, 10.0e-6, 0.2e-6),  spread_rec(1, 512, 8, kV2, 12.0e-6, 0.2e-6),
      spread_rec(1, 2048, 8, kV1, 40.0e-6, 1.0e-6), spread_rec(1, 2048, 8, kV2, 30.0e-6, 1.0e-6),
      spread_rec(1, 4096, 8, kV1, 60.0e-6, 2.0e-6), spread_rec(1, 4096, 8, kV2, 61.0e-6, 1.5e-6),
      spread_rec(1, 8192, 8, kV1, 120e-6, 2.0e-6),  spread_rec(1, 8192, 8, kV2, 90e-6, 2.0e-6)};
  const json t = build_threshold_table(rs, {{"device", {{"name", "synthetic"}}}}, 16);
  const json& p = t["decode"][0];
  // The switch between 512 (v1 by 12/10) and 2048 (v2 by 40/30): 512 * 4^0.388 = 876.6.
  EXPECT_EQ(p["v2_from"], 877);
  EXPECT_EQ(p["v2_intervals"], json::parse("[[877, null]]"));
  const json& m4k = p["measured"][2];
  EXPECT_TRUE(m4k["within_noise"].get<bool>());
  EXPECT_NEAR(m4k["margin"].get<double>(), 1.0 / 60.0, 1e-12);
  EXPECT_NEAR(m4k["noise"].get<double>(), 2.0 / 60.0, 1e-12);
  const attn_tune::ThresholdTableReader reader(t);
  EXPECT_EQ(reader.lookup(query_at(p, 4096)).family, "decode_v2");
  const json& lk = t["regret"]["sweep"]["table_lookup"];
  EXPECT_NEAR(lk["worst"].get<double>(), 1.0 / 60.0, 1e-12);
  EXPECT_EQ(lk["beyond_noise"], 0);
  // The seed engine keeps v1 at 2048 (8 kv heads * 4 partitions = 32, not above 32) and loses
  // 33% there, beyond the noise; its v2 at 4096 is within it.
  EXPECT_EQ(t["regret"]["sweep"]["seed_engine"]["beyond_noise"], 1);
  expect_lookup_within_noise(t, "within-noise case");
  // The decision at 4096 is v2 carried from 2048, not measured there, against a median 1.7%
  // lower within a noise of 3.3%: a lone tie next to no switch, which costs less than the noise
  // either way. The table does not list it.
  EXPECT_TRUE(p["noisy_decisions"].empty());
}

// A within-noise length next to a switch is a noisy decision, held-out points are not, the
// list survives the file round trip and the schema check, and noisy_decision_points names the
// workload and every configuration to time again.
TEST(ThresholdTable, ListsTheDecisionsThatRestOnNoise) {
  const KernelConfig v2b{Family::decode_v2, {{"partition", 256}}};
  std::vector<MeasurementRecord> rs = {
      // batch 1: v1, then within noise at 2048 (v2's median lower), v2 beyond noise at 8192.
      spread_rec(1, 512, 8, kV1, 10e-6, 0.1e-6), spread_rec(1, 512, 8, kV2, 20e-6, 0.1e-6),
      spread_rec(1, 2048, 8, kV1, 40e-6, 2e-6), spread_rec(1, 2048, 8, kV2, 39.5e-6, 1e-6),
      spread_rec(1, 2048, 8, v2b, 45e-6, 1e-6), spread_rec(1, 8192, 8, kV1, 160e-6, 2e-6),
      spread_rec(1, 8192, 8, kV2, 90e-6, 2e-6),
      // batch 4: clear margins everywhere.
      spread_rec(4, 512, 8, kV1, 10e-6, 0.1e-6), spread_rec(4, 512, 8, kV2, 20e-6, 0.1e-6),
      spread_rec(4, 8192, 8, kV1, 160e-6, 2e-6), spread_rec(4, 8192, 8, kV2, 90e-6, 2e-6)};
  MeasurementRecord held1 = spread_rec(2, 4096, 8, kV1, 50e-6, 5e-6);
  MeasurementRecord held2 = spread_rec(2, 4096, 8, kV2, 50.5e-6, 5e-6);
  held1.workload.held_out = held2.workload.held_out = true;
  rs.push_back(held1);
  rs.push_back(held2);
  const json t = build_threshold_table(rs, {{"device", {{"name", "synthetic"}}}}, 16);
  ASSERT_EQ(t["decode"].size(), 2u);
  const json& noisy = t["decode"][0]["noisy_decisions"];
  ASSERT_EQ(noisy.size(), 1u);
  EXPECT_EQ(noisy[0]["context_len"], 2048);
  EXPECT_EQ(noisy[0]["decision"], "v1");
  EXPECT_EQ(noisy[0]["faster"], "v2");
  EXPECT_EQ(noisy[0]["carried_from"], 512);
  EXPECT_EQ(noisy[0]["switch_at"], 8192);
  EXPECT_EQ(t["decode"][1]["noisy_decisions"], json::array()) << "clear margins: none listed";
  EXPECT_TRUE(t["held_out"][0]["within_noise"].get<bool>());

  const json back = json::parse(t.dump(1));
  EXPECT_EQ(back["decode"][0]["noisy_decisions"], noisy);

  const std::vector<NoisyPoint> pts = noisy_decision_points(rs);
  ASSERT_EQ(pts.size(), 1u) << "held-out points make no decision";
  EXPECT_EQ(pts[0].workload.batch, 1);
  EXPECT_EQ(pts[0].workload.context_len, 2048);
  ASSERT_EQ(pts[0].configs.size(), 3u) << "every configuration timed there";
  EXPECT_EQ(pts[0].configs[0].key(), kV1.key());
  EXPECT_EQ(pts[0].configs[1].key(), kV2.key());
  EXPECT_EQ(pts[0].configs[2].key(), v2b.key());
  EXPECT_EQ(pts[0].decision.switch_at, 8192);

  // Timed again (remeasured) and now apart: the decision is measured and the list empties.
  MeasurementRecord again1 = spread_rec(1, 2048, 8, kV1, 40e-6, 0.1e-6);
  MeasurementRecord again2 = spread_rec(1, 2048, 8, kV2, 39.5e-6, 0.1e-6);
  again1.remeasured = again2.remeasured = true;
  std::vector<MeasurementRecord> settled = rs;
  settled[2] = again1;
  settled[3] = again2;
  const json t2 = build_threshold_table(settled, {{"device", {{"name", "synthetic"}}}}, 16);
  EXPECT_EQ(t2["decode"][0]["noisy_decisions"], json::array());
  // v2 now wins 2048 beyond noise, by 40/39.5, where v1 won 512 by a factor of 2: the line
  // through log(v2 / v1) crosses zero just before 2048 (at 1998.0).
  EXPECT_EQ(t2["decode"][0]["v2_from"], 1999);
  // Timed again and still within noise: the entry says that more repetitions did not settle it.
  again1.p25_s = 39e-6;
  again1.p75_s = 41e-6;
  settled[2] = again1;
  const json t3 = build_threshold_table(settled, {{"device", {{"name", "synthetic"}}}}, 16);
  ASSERT_EQ(t3["decode"][0]["noisy_decisions"].size(), 1u);
  EXPECT_TRUE(t3["decode"][0]["noisy_decisions"][0]["remeasured"].get<bool>());
}

// Random medians and spreads over several shapes: wherever the winner changes, and however often,
// the table's lookup at the sweep's own points costs no more than their measured noise.
TEST(ThresholdTable, LookupRegretStaysWithinTheMeasuredNoise) {
  int several_intervals = 0;
  int closed_only = 0;
  int paid_noise = 0;
  int listed_noisy = 0;
  int unlisted_ties = 0;
  for (unsigned seed = 1; seed <= 40; ++seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> ratio(0.7, 1.4);
    std::uniform_real_distribution<double> rel_iqr(0.0, 0.15);
    std::vector<MeasurementRecord> rs;
    for (int batch : {1, 4, 16}) {
      for (int kvh : {1, 8}) {
        for (int ctx : {64, 256, 1024, 4096, 16384}) {
          const double v1 = ctx * 1e-8 * (1 + batch * kvh * 0.01);
          const double v2 = v1 * ratio(gen);
          rs.push_back(spread_rec(batch, ctx, kvh, kV1, v1, v1 * rel_iqr(gen)));
          rs.push_back(spread_rec(batch, ctx, kvh, kV2, v2, v2 * rel_iqr(gen)));
        }
      }
    }
    const json t = build_threshold_table(rs, {{"device", {{"name", "synthetic"}}}}, 16);
    expect_lookup_within_noise(t, "seed " + std::to_string(seed));
    if (::testing::Test::HasFailure()) {
      break;
    }
    for (const auto& p : t["decode"]) {
      // The noisy decisions are within-noise lengths, and every within-noise length right
      // before a switch (the next measured length decides the other way) is one of them.
      std::vector<int> within;
      std::vector<int> before_switch;
      const json& ms = p["measured"];
      const auto v2_at = [&](int ctx) {
        for (const auto& iv : p["v2_intervals"]) {
          if (ctx >= iv[0].get<int>() && (iv[1].is_null() || ctx < iv[1].get<int>())) {
            return true;
          }
        }
        return false;
      };
      for (std::size_t k = 0; k < ms.size(); ++k) {
        const int ctx = ms[k]["context_len"];
        if (!ms[k]["within_noise"].get<bool>()) {
          continue;
        }
        within.push_back(ctx);
        if (k + 1 < ms.size() && !ms[k + 1]["within_noise"].get<bool>() &&
            v2_at(ms[k + 1]["context_len"].get<int>()) != v2_at(ctx)) {
          before_switch.push_back(ctx);
        }
      }
      std::vector<int> listed;
      for (const auto& n : p["noisy_decisions"]) {
        listed.push_back(n["context_len"]);
        EXPECT_TRUE(!n["switch_at"].is_null() || n["hides_switch"].get<bool>()) << n.dump();
      }
      EXPECT_TRUE(std::includes(within.begin(), within.end(), listed.begin(), listed.end()))
          << "seed " << seed;
      EXPECT_TRUE(std::includes(listed.begin(), listed.end(), before_switch.begin(),
                                before_switch.end()))
          << "seed " << seed;
      listed_noisy += int(listed.size());
      unlisted_ties += int(within.size() - listed.size());
      several_intervals += p["v2_intervals"].size() > 1 ? 1 : 0;
      closed_only += !p.contains("v2_from") && p["v2_intervals"].size() == 1 ? 1 : 0;
    }
    paid_noise += t["regret"]["sweep"]["table_lookup"]["worst"].get<double>() > 0 ? 1 : 0;
  }
  // The draws reach the cases that matter: several v2 runs, a v2 run that ends, and lookups that
  // pay a within-noise difference.
  EXPECT_GT(several_intervals, 0);
  EXPECT_GT(closed_only, 0);
  EXPECT_GT(paid_noise, 0);
  EXPECT_GT(listed_noisy, 0);
  EXPECT_GT(unlisted_ties, 0);
}

} // namespace
} // namespace attn
