// Tests of the v1/v2 crossover on hand-made timings: the final run of v2 wins decides, ties and
// missing timings are not wins.
#include <gtest/gtest.h>

#include <vector>

#include "src/tuning/crossover.h"

namespace attn {
namespace {

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

} // namespace
} // namespace attn
