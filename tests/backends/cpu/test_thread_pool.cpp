// The CPU backend's thread pool: every task of every run exactly once, whether the workers were
// still spinning from the previous run or had blocked; a task's exception reaches the caller.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "src/backends/cpu/thread_pool.h"

using namespace attn;

namespace {

// Runs n tasks and checks that each ran once, on a worker index the pool has.
void expect_each_task_once(ThreadPool& pool, int n) {
  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
  std::atomic<int> bad_worker{0};
  pool.run(n, [&](int task, int worker) {
    hits[static_cast<std::size_t>(task)].fetch_add(1);
    if (worker < 0 || worker >= pool.size()) {
      bad_worker.fetch_add(1);
    }
  });
  for (int t = 0; t < n; ++t) {
    ASSERT_EQ(hits[static_cast<std::size_t>(t)].load(), 1) << "task " << t << " of " << n;
  }
  EXPECT_EQ(bad_worker.load(), 0);
}

} // namespace

TEST(ThreadPool, BackToBackRunsEachRunEveryTaskOnce) {
  ThreadPool pool(2);
  ASSERT_EQ(pool.size(), 2);
  for (int r = 0; r < 2000; ++r) {
    expect_each_task_once(pool, 1 + r % 17);
  }
}

TEST(ThreadPool, RunsAfterTheWorkersBlockedEachRunEveryTaskOnce) {
  ThreadPool pool(3); // more threads than some CI machines have: the blocking path from the start
  for (int r = 0; r < 5; ++r) {
    std::this_thread::sleep_for(ThreadPool::kSpin * 4); // past the spin: the workers block
    expect_each_task_once(pool, 64);
  }
}

TEST(ThreadPool, UnevenTasksAreSharedAndAllFinishBeforeRunReturns) {
  ThreadPool pool(2);
  std::atomic<int> done{0};
  pool.run(8, [&](int task, int) {
    if (task == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20)); // longer than the spin
    }
    done.fetch_add(1);
  });
  EXPECT_EQ(done.load(), 8);
}

TEST(ThreadPool, ATaskExceptionReachesTheCallerAndThePoolGoesOn) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.run(100,
                        [](int task, int) {
                          if (task == 37) {
                            throw std::runtime_error("task 37");
                          }
                        }),
               std::runtime_error);
  expect_each_task_once(pool, 100);
}
