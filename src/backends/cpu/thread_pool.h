// A fixed set of worker threads that run one indexed task range at a time, for the CPU backend.
// Tasks are handed out one by one from a shared counter, so uneven items balance themselves.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace attn {

class ThreadPool {
public:
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

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0; // bumped for each run(); workers wait for a new value
  bool stop_ = false;
  int busy_ = 0; // workers still inside the current run
  const std::function<void(int, int)>* fn_ = nullptr;
  int n_tasks_ = 0;
  std::atomic<int> next_{0};
  std::exception_ptr error_;
};

} // namespace attn
