// The adaptive sweep's kept subjects: found again by point, the most recent kept within the
// budget, one bigger than the budget dropped when the next comes.
#include <gtest/gtest.h>

#include <memory>

#include "src/model/problem_gen.h"
#include "src/tuning/subject_cache.h"

using namespace attn;

namespace {

std::unique_ptr<CheckSubject> subject(int ctx) {
  AttnParams p;
  p.num_heads = 4;
  p.num_kv_heads = 1;
  p.head_dim = 32;
  p.block_size = 16;
  p.dtype = DType::f16;
  return std::make_unique<CheckSubject>("ctx " + std::to_string(ctx),
                                        make_decode_problem(p, {ctx}, {.seed = 3}));
}

} // namespace

TEST(SubjectCache, KeepsTheMostRecentThatFitAndFindsThemByPoint) {
  const int64_t one = subject(64)->bytes();
  ASSERT_GT(one, 0);
  SubjectCache cache(2 * one + one / 2); // room for two of them
  EXPECT_EQ(cache.find(0), nullptr);
  CheckSubject& first = cache.add(0, subject(64));
  EXPECT_EQ(first.name(), "ctx 64");
  cache.add(1, subject(64));
  EXPECT_EQ(cache.find(0), &first); // found, and now the most recent
  cache.add(2, subject(64));        // point 1 is the least recent: it goes
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.find(1), nullptr);
  EXPECT_EQ(cache.find(0), &first);
  ASSERT_NE(cache.find(2), nullptr);
  EXPECT_EQ(cache.find(2)->problem().key_cache.data, subject(64)->problem().key_cache.data);

  // One bigger than the budget stays while it is the newest, alone, and goes with the next.
  CheckSubject& big = cache.add(3, subject(1024));
  ASSERT_GT(big.bytes(), 2 * one + one / 2);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.find(3), &big);
  cache.add(4, subject(64));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.find(3), nullptr);
  EXPECT_NE(cache.find(4), nullptr);
}

TEST(SubjectCache, TheDefaultBudgetIsAShareOfTheMachinesMemory) {
  SubjectCache cache; // a few subjects of a few hundred kilobytes fit on any machine this runs on
  for (std::size_t i = 0; i < 4; ++i) {
    cache.add(i, subject(256));
  }
  EXPECT_EQ(cache.size(), 4u);
}
