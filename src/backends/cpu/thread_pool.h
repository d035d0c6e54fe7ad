// A fixed set of worker threads that run one indexed task range at a time, for the CPU backend.
// Tasks are handed out one by one from a shared counter, so uneven items balance themselves.
//
// Between runs the workers, and the caller waiting for them, spin for a while before they block
// (kSpin), as an OpenMP runtime's threads do by default (libgomp spins before it sleeps): a
// worker blocked in the kernel takes tens of microseconds to wake, more in a VM, and whether it
// slept made the times of sub-millisecond calls bimodal (a quarter apart and more at 30 us).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace attn {

class ThreadPool {
public:
  // How long a worker waits for the next run, or the caller for the workers, before blocking. A
  // pool with more threads than the machine's hardware threads blocks at once.
  static constexpr std::chrono::microseconds kSpin{500};

  // `threads` workers in all, the calling thread included (0: all hardware threads).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  [[nodiscard]] int size() const { return int(workers_.size()) + 1; }

  // Calls fn(task, worker) for every task in [0, n_tasks), worker in [0, size()); returns when
  // all are done. The first exception a task throws is rethrown here after the others finish.
  void run(int n_tasks, const std::function<void(int task, int worker)>& fn);

private:
  void worker_loop(int worker);
  void drain(int worker);
  // Spins until done() holds or the spin time is over; returns done().
  template <typename Done> bool spin_until(Done done) const;

  std::vector<std::thread> workers_;
  bool spin_ = true; // false when the pool has more threads than the hardware
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  // Bumped for each run(), under mu_; workers wait for a new value.
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> busy_{0}; // workers still inside the current run
  const std::function<void(int, int)>* fn_ = nullptr;
  int n_tasks_ = 0;
  std::atomic<int> next_{0};
  std::exception_ptr error_;
};

} // namespace attn
