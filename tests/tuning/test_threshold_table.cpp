// Tests of the assembled threshold table on synthetic records with known answers: shape points
// and their crossovers, best configurations, held-out points, the fitted rule and the regret.
#include <gtest/gtest.h>

#include "src/tuning/threshold_table.h"
#include "tests/tuning/table_fixtures.h"

namespace attn {
namespace {

using nlohmann::json;

TEST(ThresholdTable, BuildsPointsBestConfigsAndRegret) {
  const json t = build_threshold_table(fixtures::two_points_and_held_out(),
                                       {{"device", {{"name", "synthetic"}}}}, 16);
  EXPECT_EQ(t["schema"], "attn-tune/threshold-table");
  EXPECT_EQ(t["version"], 1);
  EXPECT_EQ(t["measurement_counts"]["failed"], 1);
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

} // namespace
} // namespace attn
