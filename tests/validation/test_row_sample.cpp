// sample_rows: every row of a small problem, a seeded sample with both ends of a large one.
#include <gtest/gtest.h>

#include <algorithm>

#include "src/model/problem.h"
#include "src/model/problem_gen.h"
#include "src/validation/row_sample.h"

namespace attn {
namespace {

TEST(RowSample, SamplesRowsWhenTheReferenceWouldBeTooSlow) {
  AttnParams p;
  p.num_heads = 2;
  p.num_kv_heads = 1;
  p.head_dim = 16;
  p.block_size = 16;
  p.dtype = DType::f32;
  const Problem pr = make_prefill_problem(p, {20, 30}, {20, 30}, {.seed = 3});
  ValidationOptions v;
  v.max_reference_work = 1'000'000'000;
  EXPECT_TRUE(sample_rows(pr, v, 1).empty()) << "small problems are checked in full";
  v.max_reference_work = 10 * 30 * 16 * 2; // about ten rows' worth
  v.min_rows = 3;
  const auto rows = sample_rows(pr, v, 1);
  ASSERT_GE(rows.size(), 3u);
  EXPECT_LE(rows.size(), 16u);
  EXPECT_EQ(rows.front(), 0);
  EXPECT_EQ(rows.back(), 49);
  EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end()));
  EXPECT_EQ(rows, sample_rows(pr, v, 1)) << "the sample is seeded";
  v.max_reference_work = 1;
  EXPECT_EQ(sample_rows(pr, v, 1).size(), 3u) << "min_rows holds even past the cap";
}

} // namespace
} // namespace attn
