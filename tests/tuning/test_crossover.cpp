// Tests of the noise-aware v1/v2 crossover on hand-made timings: wins beyond the measured noise
// switch the decision, wins within it do not, a v2 win that ends becomes a closed interval, and a
// switch lies where log(v2 / v1) crosses zero between the two lengths around it.
#include <gtest/gtest.h>

#include <vector>

#include "src/tuning/crossover.h"

namespace attn {
namespace {

using nlohmann::json;

// Medians per context length; `iqr` is every measurement's interquartile range.
std::vector<ContextTiming> timings(const std::vector<int>& ctx, const std::vector<double>& v1,
                                   const std::vector<double>& v2, double iqr = 0.0) {
  std::vector<ContextTiming> out;
  for (std::size_t i = 0; i < ctx.size(); ++i) {
    out.push_back({ctx[i], v1[i], v2[i], iqr, iqr});
  }
  return out;
}

const std::vector<int> kCtx = {128, 512, 2048, 8192};

TEST(Crossover, ComparesAgainstTheLargerInterquartileRange) {
  // 1.0 vs 1.25: the difference 0.25 is within an IQR of 0.25, beyond one of 0.125.
  Comparison c = compare({64, 1.25, 1.0, 0.125, 0.25});
  EXPECT_TRUE(c.both);
  EXPECT_TRUE(c.v2_faster);
  EXPECT_TRUE(c.within_noise);
  EXPECT_DOUBLE_EQ(c.margin, 0.25);
  EXPECT_DOUBLE_EQ(c.noise, 0.25);
  c = compare({64, 1.25, 1.0, 0.125, 0.125});
  EXPECT_FALSE(c.within_noise);
  EXPECT_DOUBLE_EQ(c.noise, 0.125);
  // An exact tie without a recorded spread is within noise: nobody wins it.
  EXPECT_TRUE(compare({64, 2.0, 2.0}).within_noise);
  // A missing family loses beyond noise; neither measured is not a measurement.
  c = compare({64, kInf, 3.0});
  EXPECT_TRUE(c.v2_faster);
  EXPECT_FALSE(c.within_noise);
  EXPECT_FALSE(c.both);
  EXPECT_FALSE(compare({64, kInf, kInf}).measured);
}

TEST(Crossover, SingleThresholdsKeepTheirVersion1Form) {
  // v2 twice as slow at 512, twice as fast at 2048: the switch lies halfway in log length.
  Crossover c = find_crossover(timings(kCtx, {1, 2, 4, 8}, {2, 4, 2, 4}));
  ASSERT_EQ(c.v2.size(), 1u);
  EXPECT_EQ(c.v2[0], (V2Interval{1024, std::nullopt}));
  EXPECT_EQ(c.intervals_json(), json::parse("[[1024, null]]"));
  EXPECT_EQ(c.v2_from_json(), json(1024));
  EXPECT_FALSE(c.uses_v2(1023));
  EXPECT_TRUE(c.uses_v2(1024));
  EXPECT_TRUE(c.uses_v2(1 << 20));
  c = find_crossover(timings(kCtx, {5, 5, 5, 5}, {1, 2, 3, 4}));
  EXPECT_EQ(c.intervals_json(), json::parse("[[1, null]]"));
  EXPECT_EQ(c.v2_from_json(), json("always"));
  EXPECT_TRUE(c.uses_v2(1));
  c = find_crossover(timings(kCtx, {1, 2, 3, 4}, {5, 5, 5, 5}));
  EXPECT_EQ(c.intervals_json(), json::array());
  EXPECT_EQ(c.v2_from_json(), json("never"));
  EXPECT_EQ(find_crossover({}).v2_from_json(), json("never"));
}

TEST(Crossover, AWinThatEndsBecomesAnInterval) {
  // The case: v2 wins by 28% at 64 and by 20% at 512, v1 by 20% at 4096. The old single
  // threshold made this "never" and lost 28% at 64. The switch back lies at sqrt(512 * 4096),
  // 1448.2, rounded up.
  Crossover c = find_crossover(
      timings({64, 512, 4096}, {27.1e-6, 60e-6, 300e-6}, {21.2e-6, 50e-6, 360e-6}, 0.2e-6));
  EXPECT_EQ(c.intervals_json(), json::parse("[[1, 1449]]"));
  EXPECT_FALSE(c.v2_from_json().has_value());
  EXPECT_TRUE(c.uses_v2(64));
  EXPECT_TRUE(c.uses_v2(1448));
  EXPECT_FALSE(c.uses_v2(1449));
  EXPECT_FALSE(c.comparisons[0].within_noise);
  EXPECT_NEAR(c.comparisons[0].margin, 27.1 / 21.2 - 1, 1e-12);
  // v1, v2, v1, v2 beyond noise, each by a factor of 2: two closed switches and an open end,
  // each halfway between its two lengths.
  c = find_crossover(timings({128, 512, 2048, 8192, 32768}, {1, 2, 1, 2, 2}, {2, 1, 2, 1, 1}));
  EXPECT_EQ(c.intervals_json(), json::parse("[[256, 1024], [4096, null]]"));
  EXPECT_FALSE(c.uses_v2(128));
  EXPECT_TRUE(c.uses_v2(512));
  EXPECT_FALSE(c.uses_v2(2048));
  EXPECT_TRUE(c.uses_v2(9000));
}

TEST(Crossover, WinsWithinNoiseDoNotFlipTheDecision) {
  // IQR 0.5: v2 wins beyond noise at 128, v1 "wins" by 0.3 at 512 and 2048 (noise), v1 beyond
  // noise at 8192. The within-noise lengths keep v2; since v1's median is already the lower one
  // at 2048, the switch to v1 comes right after it.
  Crossover c = find_crossover(timings(kCtx, {3, 4.0, 8.0, 9}, {1, 4.3, 8.3, 12}, 0.5));
  EXPECT_EQ(c.intervals_json(), json::parse("[[1, 2049]]"));
  EXPECT_TRUE(c.uses_v2(512));
  EXPECT_TRUE(c.uses_v2(2048));
  EXPECT_TRUE(c.comparisons[1].within_noise);
  EXPECT_TRUE(c.comparisons[2].within_noise);
  // The same medians measured without spread flip at every length: v1 from 512 on.
  c = find_crossover(timings(kCtx, {3, 4.0, 8.0, 9}, {1, 4.3, 8.3, 12}));
  ASSERT_EQ(c.v2.size(), 1u);
  EXPECT_EQ(c.v2[0].from, 1);
  EXPECT_TRUE(c.uses_v2(128));
  EXPECT_FALSE(c.uses_v2(512));
  // Leading lengths within noise take the first decision beyond noise.
  c = find_crossover(timings(kCtx, {1.0, 2.0, 4, 8}, {1.1, 1.9, 2, 4}, 0.2));
  EXPECT_EQ(c.v2_from_json(), json("always"));
  // Nothing beyond noise: v1 (the single launch) stands everywhere.
  c = find_crossover(timings(kCtx, {1.0, 2.0, 4.0, 8.0}, {1.1, 1.9, 4.1, 7.9}, 0.2));
  EXPECT_EQ(c.v2_from_json(), json("never"));
  // Ties are within noise and keep the decision before them.
  c = find_crossover(timings(kCtx, {1, 2, 4, 8}, {2, 1, 1, 8}));
  EXPECT_EQ(c.intervals_json(), json::parse("[[256, null]]"));
}

TEST(Crossover, TheSwitchLiesWhereTheLogRatioCrossesZero) {
  // log(v2 / v1) goes from log 2 at 512 to -2 log 2 at 2048: zero a third of the way, in log
  // length: 512 * 4^(1/3) = 812.7, rounded up.
  EXPECT_EQ(switch_between({512, 1, 2}, {2048, 4, 1}), 813);
  // Halfway: exactly sqrt(512 * 2048), not one more for rounding error.
  EXPECT_EQ(switch_between({512, 1, 2}, {2048, 2, 1}), 1024);
  EXPECT_EQ(switch_between({512, 2, 1}, {2048, 1, 2}), 1024) << "v2 to v1 the same way";
  // Both medians on the same side of zero: the line crosses outside the two lengths, and the
  // switch is kept between them, right after the shorter one or at the longer one.
  EXPECT_EQ(switch_between({8192, 40, 39.6}, {12288, 60, 50}), 8193);
  EXPECT_EQ(switch_between({8192, 40, 45}, {12288, 60, 61}), 12288);
  // A family missing at either length: the switch stays at the longer one.
  EXPECT_EQ(switch_between({512, 1, kInf}, {2048, 2, 1}), 2048);
  EXPECT_EQ(switch_between({512, 1, 2}, {2048, kInf, 1}), 2048);
  // Adjacent lengths: nothing between them.
  EXPECT_EQ(switch_between({512, 1, 2}, {513, 2, 1}), 513);
  // Through find_crossover: v1 by 2x at 512, v2 by 4x at 2048.
  EXPECT_EQ(find_crossover(timings({512, 2048}, {1, 4}, {2, 1})).v2_from_json(), json(813));
}

TEST(Crossover, MissingTimingsLoseAndEmptyLengthsAreSkipped) {
  // Missing v2 at 512 is a v1 win; the length with neither family does not end the v2 run.
  Crossover c = find_crossover(timings(kCtx, {1, 2, kInf, 8}, {2, kInf, kInf, 4}));
  EXPECT_EQ(c.v2_from_json(), json(8192));
  c = find_crossover(timings(kCtx, {2, kInf, kInf, 1}, {1, 1, kInf, 2}));
  EXPECT_EQ(c.intervals_json(), json::parse("[[1, 8192]]"));
  ASSERT_EQ(c.comparisons.size(), 4u);
  EXPECT_FALSE(c.comparisons[2].measured);
}

TEST(NoisyDecisions, AClearCrossoverFlagsNothing) {
  // v1 beyond noise at the short lengths, v2 beyond noise at the long ones: every decision is
  // measured where it is made, as on a quiet machine with clear margins.
  Crossover c = find_crossover(timings(kCtx, {1, 2, 4, 8}, {2, 4, 2, 4}, 0.1));
  EXPECT_EQ(c.v2_from_json(), json(1024));
  EXPECT_TRUE(c.noisy.empty());
  // Missing families lose beyond noise: nothing to flag either.
  c = find_crossover(timings(kCtx, {1, 2, kInf, 8}, {2, kInf, kInf, 4}));
  EXPECT_TRUE(c.noisy.empty());
  EXPECT_TRUE(find_crossover({}).noisy.empty());
}

TEST(NoisyDecisions, AWithinNoiseLengthCarriesItsDecisionAndIsFlagged) {
  // The case: the crossover lies near 6400 keys; at 8192 v2's median is 1% faster but
  // the noise is 5%, so the table keeps v1 there. v2 is the faster median at both 8192 and
  // 12288, so the switch comes right after 8192, where the old rule put it at 12288.
  const std::vector<int> ctx = {2048, 4096, 8192, 12288, 16384};
  Crossover c = find_crossover(timings(ctx, {10, 20, 40.0, 60, 80}, {14, 24, 39.6, 50, 60}, 2.0));
  EXPECT_EQ(c.v2_from_json(), json(8193));
  ASSERT_EQ(c.noisy.size(), 1u);
  const NoisyDecision& n = c.noisy[0];
  EXPECT_EQ(n.context_len, 8192);
  EXPECT_FALSE(n.v2);
  EXPECT_TRUE(n.v2_faster);
  EXPECT_TRUE(n.against_median());
  EXPECT_NEAR(n.margin, 40.0 / 39.6 - 1, 1e-12);
  EXPECT_NEAR(n.noise, 2.0 / 39.6, 1e-12);
  EXPECT_EQ(n.carried_from, 4096);
  EXPECT_EQ(n.switch_at, 12288) << "the first length measured on the new side";
  // Two within-noise lengths before the switch: both could move it, both carry from 2048.
  c = find_crossover(timings(ctx, {10, 20.0, 40.0, 60, 80}, {14, 19.8, 40.2, 50, 60}, 2.0));
  ASSERT_EQ(c.noisy.size(), 2u);
  EXPECT_EQ(c.noisy[0].context_len, 4096);
  EXPECT_EQ(c.noisy[0].carried_from, 2048);
  EXPECT_EQ(c.noisy[0].switch_at, 12288);
  EXPECT_TRUE(c.noisy[0].against_median());
  EXPECT_EQ(c.noisy[1].context_len, 8192);
  EXPECT_EQ(c.noisy[1].switch_at, 12288);
  EXPECT_FALSE(c.noisy[1].against_median()) << "v1 kept where v1's median is faster";
}

TEST(NoisyDecisions, TiesThatNeitherBorderNorHideASwitchAreNotListed) {
  // Leading lengths within noise take the first decision beyond noise; their medians disagree
  // with each other (v1 at 128, v2 at 512): ties, no switch to move or hide.
  Crossover c = find_crossover(timings(kCtx, {1.0, 2.0, 4, 8}, {1.1, 1.9, 2, 4}, 0.2));
  EXPECT_EQ(c.v2_from_json(), json("always"));
  EXPECT_TRUE(c.noisy.empty());
  // A trailing tie keeps the last decision to the open end: nothing after it to move.
  c = find_crossover(timings(kCtx, {1, 2, 4, 8.0}, {2, 3, 3, 7.9}, 0.5));
  EXPECT_TRUE(c.noisy.empty());
  // One length whose median favours the other family, alone in its run, is a tie too.
  c = find_crossover(timings(kCtx, {1, 2.0, 4, 8}, {2, 1.9, 5, 9}, 0.2));
  EXPECT_EQ(c.v2_from_json(), json("never"));
  EXPECT_TRUE(c.noisy.empty());
  // Nothing beyond noise and the medians disagree: v1 by default, a tie everywhere.
  c = find_crossover(timings(kCtx, {1.0, 2.0, 4.0, 8.0}, {1.1, 1.9, 4.1, 7.9}, 0.2));
  EXPECT_TRUE(c.noisy.empty());
}

TEST(NoisyDecisions, ARunWhoseMediansAllFavourTheOtherFamilyHidesASwitch) {
  // v1 beyond noise at 128; at 512, 2048 and 8192 v2's median is lower each time, within noise:
  // the table keeps v1 throughout, and a switch to v2 may hide in the noise.
  Crossover c = find_crossover(timings(kCtx, {1, 2.0, 4.0, 8.0}, {2, 1.9, 3.9, 7.8}, 0.5));
  EXPECT_EQ(c.v2_from_json(), json("never"));
  ASSERT_EQ(c.noisy.size(), 3u);
  for (const NoisyDecision& n : c.noisy) {
    EXPECT_TRUE(n.hides_switch);
    EXPECT_TRUE(n.against_median());
    EXPECT_EQ(n.carried_from, 128);
    EXPECT_FALSE(n.switch_at.has_value());
  }
  // Nothing beyond noise, v2's median lower at every length: v1 by default hides a switch.
  c = find_crossover(timings(kCtx, {1.1, 2.1, 4.1, 8.1}, {1.0, 2.0, 4.0, 8.0}, 0.2));
  ASSERT_EQ(c.noisy.size(), 4u);
  EXPECT_FALSE(c.noisy[0].v2);
  EXPECT_FALSE(c.noisy[0].carried_from.has_value());
  EXPECT_TRUE(c.noisy[3].hides_switch);
}

TEST(NoisyDecisions, AWithinNoiseRunInsideAV2RunBordersTheSwitchBack) {
  const Crossover c =
      find_crossover(timings({128, 512, 2048, 8192}, {1, 2, 5.0, 1}, {2, 1, 5.1, 2}, 0.2));
  EXPECT_EQ(c.intervals_json(), json::parse("[[256, 2049]]"));
  ASSERT_EQ(c.noisy.size(), 1u);
  EXPECT_EQ(c.noisy[0].context_len, 2048);
  EXPECT_EQ(c.noisy[0].carried_from, 512);
  EXPECT_EQ(c.noisy[0].switch_at, 8192);
  EXPECT_FALSE(c.noisy[0].hides_switch);
}

} // namespace
} // namespace attn
