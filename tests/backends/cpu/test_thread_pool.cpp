// The CPU backend's thread pool: every task of every run exactly once, whether the workers were
// still spinning from the previous run or had blocked; a task's exception reaches the caller.
#include <gtest/gtest.h>

#include <sched.h>

#include <algorithm>
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

#if defined(__linux__)
// Workers that share one CPU with the caller (another process holds the other CPUs, or an
// affinity mask holds them to one) must not spin it away from each other: before the spin
// yielded, every run cost a whole spin (1 ms per parallel step of a kernel). The median run of
// two trivial tasks stays far under the spin; the test measures a pathology, not a speed.
TEST(ThreadPool, WorkersHeldToOneCpuWithTheCallerDoNotSpinItAway) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof saved, &saved), 0);
  int cpu = -1;
  for (int c = 0; c < CPU_SETSIZE && cpu < 0; ++c) {
    cpu = CPU_ISSET(c, &saved) ? c : -1;
  }
  ASSERT_GE(cpu, 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0); // the workers inherit it
  std::vector<double> us;
  {
    ThreadPool pool(2);
    std::atomic<int> sink{0};
    for (int r = 0; r < 101; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      pool.run(2, [&](int task, int) { sink.fetch_add(task); });
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof saved, &saved), 0);
  std::nth_element(us.begin(), us.begin() + 50, us.end());
  const double spin_us = std::chrono::duration<double, std::micro>(ThreadPool::kSpin).count();
  EXPECT_LT(us[50], spin_us / 4) << "median run " << us[50] << " us on one CPU";
}
#endif
