#include "src/backends/cpu/thread_pool.h"

#include <algorithm>

namespace attn {

ThreadPool::ThreadPool(int threads) {
  const int n = threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
  for (int w = 1; w < n; ++w) {
    workers_.emplace_back([this, w] { worker_loop(w); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) {
    t.join();
  }
}

void ThreadPool::drain(int worker) {
  for (int task = next_.fetch_add(1); task < n_tasks_; task = next_.fetch_add(1)) {
    try {
      (*fn_)(task, worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) {
        error_ = std::current_exception();
      }
      next_.store(n_tasks_); // stop handing out work
    }
  }
}

void ThreadPool::worker_loop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) {
        return;
      }
      seen = generation_;
    }
    drain(worker);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --busy_;
    }
    done_cv_.notify_one();
  }
}

void ThreadPool::run(int n_tasks, const std::function<void(int task, int worker)>& fn) {
  if (n_tasks <= 0) {
    return;
  }
  if (workers_.empty() || n_tasks == 1) {
    for (int t = 0; t < n_tasks; ++t) {
      fn(t, 0);
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_tasks_ = n_tasks;
    next_.store(0);
    error_ = nullptr;
    busy_ = int(workers_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  drain(0);
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return busy_ == 0; });
    fn_ = nullptr;
    err = error_;
  }
  if (err) {
    std::rethrow_exception(err);
  }
}

} // namespace attn
