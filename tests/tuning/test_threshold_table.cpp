// Tests of the threshold table on synthetic timings with known answers: crossover detection,
// rule fitting, regret of the reference rules, the assembled table and atomic writes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "src/io/atomic_file.h"
#include "src/backends/registry.h"
#include "src/cli/table_text.h"
#include "src/model/errors.h"
#include "src/tuning/threshold_table.h"

namespace attn {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<ContextTiming> timings(const std::vector<int>& ctx, const std::vector<double>& v1,
                                   const std::vector<double>& v2) {
  std::vector<ContextTiming> out;
  for (std::size_t i = 0; i < ctx.size(); ++i) {
    out.push_back({ctx[i], v1[i], v2[i]});
  }
  return out;
}

TEST(Crossover, FindsTheStartOfTheFinalRunOfV2Wins) {
  const std::vector<int> ctx = {128, 512, 2048, 8192};
  auto c = find_crossover(timings(ctx, {1, 2, 4, 8}, {2, 3, 3, 4}));
  EXPECT_EQ(c.kind, Crossover::threshold);
  EXPECT_EQ(c.from, 2048);
  EXPECT_EQ(c.to_json(), json(2048));
  // A v2 win at 512 followed by a loss at 2048 does not count: v2 must stay faster.
  c = find_crossover(timings(ctx, {1, 2, 4, 8}, {2, 1, 5, 4}));
  EXPECT_EQ(c.from, 8192);
  // A tie is not a win.
  c = find_crossover(timings(ctx, {1, 2, 4, 8}, {2, 1, 1, 8}));
  EXPECT_EQ(c.kind, Crossover::never);
  EXPECT_EQ(c.to_json(), json("never"));
  c = find_crossover(timings(ctx, {5, 5, 5, 5}, {1, 2, 3, 4}));
  EXPECT_EQ(c.kind, Crossover::always);
  EXPECT_EQ(c.to_json(), json("always"));
  // Missing v2 counts as a v1 win; entries with neither are ignored.
  c = find_crossover(timings(ctx, {1, kInf, 4, 8}, {2, kInf, kInf, 4}));
  EXPECT_EQ(c.from, 8192);
  c = find_crossover(timings(ctx, {1, 2, kInf, kInf}, {2, 1, kInf, kInf}));
  EXPECT_EQ(c.from, 512);
  EXPECT_EQ(find_crossover({}).kind, Crossover::never);
}

// Points whose best family follows `batch * kvh * ceil(ctx / 512) > 3 * sm` exactly, with
// GQA ratios that differ so that the definitions counting query heads do not fit as well.
std::vector<DecodePoint> rule_points(int sm) {
  std::vector<DecodePoint> pts;
  for (int batch : {1, 2, 4, 8, 16}) {
    for (int kvh : {1, 2, 8}) {
      for (int gqa : {1, 4, 7}) {
        for (int ctx : {256, 1000, 4096, 9000, 30000}) {
          DecodePoint p;
          p.batch = batch;
          p.num_kv_heads = kvh;
          p.num_heads = kvh * gqa;
          p.context_len = ctx;
          const double tiles = double(batch) * kvh * std::ceil(ctx / 512.0);
          const bool v2 = tiles > 3.0 * sm;
          p.v1_s = 1.0;
          p.v2_by_partition[512] = v2 ? 0.5 : 1.5;
          p.v2_by_partition[256] = v2 ? 0.8 : 2.0;
          p.best_s = v2 ? 0.5 : 1.0;
          p.by_config["decode_v1[]"] = p.v1_s;
          p.by_config["decode_v2[partition=256]"] = p.v2_by_partition[256];
          p.by_config["decode_v2[partition=512]"] = p.v2_by_partition[512];
          pts.push_back(p);
        }
      }
    }
  }
  return pts;
}

TEST(RuleFit, RecoversTheGeneratingRule) {
  const int sm = 10;
  const auto pts = rule_points(sm);
  std::vector<RuleFit> all;
  const RuleFit f = fit_rule(pts, sm, &all);
  EXPECT_EQ(f.tiles, TilesDef::batch_kv_heads_parts);
  EXPECT_EQ(f.partition, 512);
  EXPECT_DOUBLE_EQ(f.total_regret, 0.0);
  EXPECT_EQ(f.points, int(pts.size()));
  // k separates the largest v1 tile count from the smallest v2 one (tiles / sm).
  double hi_v1 = 0, lo_v2 = 1e30;
  for (const auto& p : pts) {
    const double x = count_tiles(TilesDef::batch_kv_heads_parts, p, 512) / sm;
    if (p.best_s < 1.0) {
      lo_v2 = std::min(lo_v2, x);
    } else {
      hi_v1 = std::max(hi_v1, x);
    }
  }
  EXPECT_GE(f.k, hi_v1);
  EXPECT_LT(f.k, lo_v2);
  for (const auto& p : pts) {
    EXPECT_EQ(f.uses_v2(p), p.best_s < 1.0)
        << p.batch << " " << p.num_kv_heads << " " << p.context_len;
  }
  // Every (definition, partition) was tried: 4 definitions x 2 partitions.
  EXPECT_EQ(all.size(), 8u);
  for (const auto& c : all) {
    EXPECT_GE(c.total_regret, f.total_regret);
    if (c.tiles == TilesDef::batch_heads_parts) {
      EXPECT_GT(c.total_regret, 0.0) << "query-head counts should not fit GQA-varied data";
    }
  }
}

TEST(RuleFit, MinimisesTotalRegretOnNoisyData) {
  // Three points along one axis; v2 wins at tiles 4 and 16, loses at 2 and (slightly) at 8.
  std::vector<DecodePoint> pts;
  auto add = [&](int ctx, double v1, double v2) {
    DecodePoint p;
    p.batch = 1;
    p.num_heads = 1;
    p.num_kv_heads = 1;
    p.context_len = ctx;
    p.v1_s = v1;
    p.v2_by_partition[512] = v2;
    p.best_s = std::min(v1, v2);
    pts.push_back(p);
  };
  add(1024, 1.0, 2.0); // tiles 2: v2 would cost +100%
  add(2048, 2.0, 1.0); // tiles 4: v1 would cost +100%
  add(4096, 1.0, 1.1); // tiles 8: v2 costs +10%
  add(8192, 4.0, 1.0); // tiles 16: v1 costs +300%
  const RuleFit f = fit_rule(pts, 1);
  // The best threshold is between 2 and 4 (regret 0.1, from the point at 8).
  EXPECT_NEAR(f.total_regret, 0.1, 1e-12);
  EXPECT_GT(f.k, 2.0);
  EXPECT_LT(f.k, 4.0);
  const Regret r = regret_of(pts, [&](const DecodePoint& p) {
    return RuleChoice{f.uses_v2(p), 512};
  });
  EXPECT_NEAR(r.mean, 0.1 / 4, 1e-12);
  EXPECT_NEAR(r.worst, 0.1, 1e-12);
  EXPECT_EQ(r.points, 4);
}

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

MeasurementRecord rec(int batch, int ctx, int kvh, const KernelConfig& c, double s,
                      bool held_out = false, const char* status = "ok") {
  MeasurementRecord r;
  r.workload.phase = Phase::decode;
  r.workload.batch = batch;
  r.workload.context_len = ctx;
  r.workload.held_out = held_out;
  r.workload.params.num_kv_heads = kvh;
  r.workload.params.num_heads = kvh * 4;
  r.workload.params.head_dim = 128;
  r.workload.params.block_size = 16;
  r.workload.params.dtype = DType::f16;
  r.config = c;
  r.status = status;
  r.median_s = s;
  r.method = "synthetic";
  return r;
}

TEST(ThresholdTable, BuildsPointsBestConfigsAndRegret) {
  const KernelConfig v1{Family::decode_v1, {}};
  const KernelConfig v2a{Family::decode_v2, {{"partition", 256}}};
  const KernelConfig v2b{Family::decode_v2, {{"partition", 512}}};
  std::vector<MeasurementRecord> rs;
  // batch 1, kvh 8: v2 wins from 2048.
  for (auto [ctx, t1, ta, tb] : std::vector<std::tuple<int, double, double, double>>{
           {512, 1.0, 1.5, 1.6}, {2048, 4.0, 2.0, 3.0}, {8192, 16.0, 6.0, 5.0}}) {
    rs.push_back(rec(1, ctx, 8, v1, t1));
    rs.push_back(rec(1, ctx, 8, v2a, ta));
    rs.push_back(rec(1, ctx, 8, v2b, tb));
  }
  // batch 64, kvh 8: v1 always.
  for (int ctx : {512, 2048, 8192}) {
    rs.push_back(rec(64, ctx, 8, v1, ctx * 1e-3));
    rs.push_back(rec(64, ctx, 8, v2b, ctx * 2e-3));
  }
  rs.push_back(rec(64, 8192, 8, v2a, 0, false, "failed"));
  // A held-out point where v2 wins.
  rs.push_back(rec(2, 4096, 8, v1, 3.0, true));
  rs.push_back(rec(2, 4096, 8, v2b, 1.5, true));
  const json t = build_threshold_table(rs, {{"device", {{"name", "synthetic"}}}}, 16);
  EXPECT_EQ(t["schema"], "attn-tune/threshold-table");
  EXPECT_EQ(t["version"], 1);
  EXPECT_EQ(t["measurement_counts"]["failed"], 1);
  json full = t;
  full["provenance"] = {
      {"device", {{"name", "synthetic"}}},     {"tool", {{"version", "v"}, {"git_hash", "g"}}},
      {"kernel_sources_sha256", "0"},          {"profile", {{"name", "p"}, {"hash", "h"}}},
      {"created_utc", "2026-01-01T00:00:00Z"}, {"timing_method", "synthetic"}};
  EXPECT_NO_THROW(validate_table(full));
  json broken = full;
  broken["decode"][1]["measured"][2]["best"].erase("median_s");
  try {
    validate_table(broken);
    FAIL() << "a missing field must be reported";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "threshold table: decode[1].measured[2].best.median_s: missing");
  }
  broken = full;
  broken["decode"][0]["v2_from"] = "sometimes";
  EXPECT_THROW(validate_table(broken), InputError);
  broken = full;
  broken["regret"]["held_out"]["vllm"]["mean"] = "low";
  try {
    validate_table(broken);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "threshold table: regret.held_out.vllm.mean: expected a number");
  }
  ASSERT_EQ(t["decode"].size(), 2u);
  const json* b1 = nullptr;
  const json* b64 = nullptr;
  for (const auto& p : t["decode"]) {
    (p["batch"] == 1 ? b1 : b64) = &p;
  }
  ASSERT_TRUE(b1 && b64);
  EXPECT_EQ((*b1)["v2_from"], 2048);
  EXPECT_EQ((*b64)["v2_from"], "never");
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
  // vLLM: batch 1 ctx 512 is one partition -> v1 (best); ctx 2048 with 1 * 32 seqs*heads
  // <= 512 -> v2 at partition 512, 3.0 against 2.0: +50%; everything else picks the best.
  EXPECT_NEAR(t["regret"]["sweep"]["vllm"]["worst"].get<double>(), 0.5, 1e-12);
  EXPECT_NEAR(t["regret"]["sweep"]["vllm"]["mean"].get<double>(), 0.5 / 6, 1e-12);
}

TEST(ThresholdTable, ShowExplainsTheTable) {
  const KernelConfig v1{Family::decode_v1, {}};
  const KernelConfig v2{Family::decode_v2, {{"partition", 512}}};
  std::vector<MeasurementRecord> rs = {rec(1, 512, 8, v1, 1.0), rec(1, 512, 8, v2, 2.0),
                                       rec(1, 4096, 8, v1, 4.0), rec(1, 4096, 8, v2, 2.0)};
  const json prov = {{"device",
                      {{"name", "Synthetic GPU"},
                       {"id", "cuda:0"},
                       {"sm_count", 16},
                       {"compute_capability", "9.0"}}},
                     {"profile", {{"name", "p"}, {"hash", "0123"}}},
                     {"tool", {{"version", "0.1.0"}, {"git_hash", "abc"}}},
                     {"kernel_sources_sha256", std::string(64, 'f')},
                     {"created_utc", "2026-01-01T00:00:00Z"},
                     {"timing_method", "synthetic"}};
  const std::string text = cli::describe_table(build_threshold_table(rs, prov, 16));
  EXPECT_NE(text.find("Synthetic GPU (cuda:0), 16 SMs"), std::string::npos) << text;
  EXPECT_NE(text.find("fp16 d=128 bs=16 kvh=8 gqa=4 batch=1: v2 from ctx 4096"), std::string::npos)
      << text;
  EXPECT_NE(text.find("fitted rule: use v2 (partition 512) when"), std::string::npos) << text;
}

TEST(ThresholdTable, WritesAtomicallyAndSlugsDevices) {
  const fs::path dir = fs::temp_directory_path() / ("attn_tt_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "t.json").string();
  write_json_atomically(path, {{"a", 1}});
  write_json_atomically(path, {{"a", 2}});
  EXPECT_EQ(json::parse(std::ifstream(path))["a"], 2);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1) << "no temporary file left behind";
  fs::remove_all(dir);
  DeviceInfo g;
  g.backend = "cuda";
  g.name = "NVIDIA H200";
  EXPECT_EQ(device_slug(g), "nvidia-h200");
  DeviceInfo c;
  c.backend = "cpu";
  c.name = "Intel(R) Xeon(R) Platinum 8480+";
  EXPECT_EQ(device_slug(c), "cpu-intel-r-xeon-r-platinum-8480");
}

} // namespace
} // namespace attn
