// The adaptive sweep's kept subjects: found again by point, the most recent kept within the
// budget, one bigger than the budget dropped when the next comes.
#include <gtest/gtest.h>

#include <memory>

#include "src/model/problem_gen.h"
#include "src/model/workload.h"
#include "src/tuning/subject_cache.h"
#include "tests/support/problems.h"

using namespace attn;

namespace {

std::unique_ptr<CheckSubject> subject(int ctx) {
  return std::make_unique<CheckSubject>(
      "ctx " + std::to_string(ctx),
      make_decode_problem(test::params(4, 1, 32), {ctx}, {.seed = 3}));
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

TEST(SubjectCache, MakingRoomForANewSubjectLetsTheLeastRecentGo) {
  const int64_t one = subject(64)->bytes();
  SubjectCache cache(3 * one + one / 2);
  for (std::size_t i = 0; i < 3; ++i) {
    cache.add(i, subject(64));
  }
  (void)cache.find(0); // now the most recent: 1 is the least
  cache.make_room(one / 2);
  EXPECT_EQ(cache.size(), 3u); // it fits beside the three
  cache.make_room(one);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.find(1), nullptr);
  EXPECT_NE(cache.find(0), nullptr);
  cache.make_room(10 * one); // more than the budget: none kept
  EXPECT_EQ(cache.size(), 0u);
}

// make_room is given what the new problem's caches will take: the estimate is what a generated
// problem allocates, for a decode batch of mixed lengths, fp8 caches and a prefill batch.
TEST(SubjectCache, TheCacheBytesOfAWorkloadAreWhatItsProblemTakes) {
  Workload d;
  d.params = test::params();
  d.set_decode_lens({30, 2000, 7});
  Workload f = d;
  f.params.kv_dtype = DType::fp8_e4m3;
  Workload pf = d;
  pf.phase = Phase::prefill;
  pf.context_lens.clear();
  pf.batch = 2;
  pf.q_len = 100;
  pf.k_len = 300;
  for (const Workload* w : {&d, &f, &pf}) {
    for (const double pool : {1.0, 1.5, 3.0}) {
      const Problem pr = make_workload_problem(*w, pool, 1);
      EXPECT_EQ(workload_cache_bytes(*w, pool),
                double(pr.key_cache.data.size() + pr.value_cache.data.size()))
          << w->key() << " pool " << pool;
    }
  }
}
