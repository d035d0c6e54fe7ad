// Tests of the rule fit: it recovers the rule that generated synthetic timings, minimises total
// regret when no threshold separates the families exactly, and fits a v2 that chooses its own
// splits without making up a partition for it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "src/model/errors.h"
#include "src/tuning/regret.h"
#include "src/tuning/rule_fit.h"

namespace attn {
namespace {

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

// A v2 without a partition (the kernel chooses its splits): the fit counts keys in place of
// partitions, launches v2 with the kernel's own splits, and says so in the table's rule.
TEST(RuleFit, FitsAKernelThatChoosesItsSplitsWithoutAPartition) {
  std::vector<DecodePoint> pts;
  for (int batch : {1, 4, 16}) {
    for (int ctx : {256, 2048, 16384}) {
      DecodePoint p;
      p.batch = batch;
      p.num_heads = 8;
      p.num_kv_heads = 2;
      p.context_len = ctx;
      const bool v2 = double(batch) * 2 * ctx > 4 * 20000.0; // batch*kvh*ctx > k * sm, k = 4
      p.v1_s = 1.0;
      p.v2_by_partition[kKernelSplits] = v2 ? 0.5 : 1.5;
      p.best_s = v2 ? 0.5 : 1.0;
      pts.push_back(p);
    }
  }
  std::vector<RuleFit> all;
  const RuleFit f = fit_rule(pts, 20000, &all);
  EXPECT_EQ(f.partition, kKernelSplits);
  EXPECT_EQ(f.tiles, TilesDef::batch_kv_heads_parts);
  EXPECT_DOUBLE_EQ(f.total_regret, 0.0);
  EXPECT_EQ(all.size(), 4u) << "one candidate per definition: there is no partition to vary";
  for (const auto& p : pts) {
    EXPECT_EQ(f.uses_v2(p), p.best_s < 1.0) << p.batch << " " << p.context_len;
    EXPECT_EQ(count_tiles(TilesDef::kv_heads_parts, p, kKernelSplits), 2.0 * p.context_len);
  }
  EXPECT_EQ(fitted_rule(f)(pts.back()).partition, kKernelSplits);
  const nlohmann::json j = f.to_json();
  EXPECT_TRUE(j["partition"].is_null());
  EXPECT_EQ(j["tiles"], "batch*num_kv_heads*context_len");
  const RuleFit back = RuleFit::from_json(j);
  EXPECT_EQ(back.partition, kKernelSplits);
  EXPECT_EQ(back.tiles, TilesDef::batch_kv_heads_parts);
  EXPECT_DOUBLE_EQ(back.k, f.k);
  // A partition's tiles go with a partition, the kernel's splits' with none.
  nlohmann::json mixed = j;
  mixed["partition"] = 512;
  EXPECT_THROW((void)RuleFit::from_json(mixed), InputError);
  mixed = RuleFit{}.to_json();
  EXPECT_EQ(mixed["tiles"], "batch*num_kv_heads*partitions");
  mixed["partition"] = nullptr;
  EXPECT_THROW((void)RuleFit::from_json(mixed), InputError);
}

} // namespace
} // namespace attn
