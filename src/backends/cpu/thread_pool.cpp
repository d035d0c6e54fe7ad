#include "src/backends/cpu/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace attn {

namespace {

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

} // namespace

ThreadPool::ThreadPool(int threads) {
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  const int n = threads > 0 ? threads : hw;
  spin_ = n <= hw;
  for (int w = 1; w < n; ++w) {
    workers_.emplace_back([this, w] { worker_loop(w); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  start_cv_.notify_all();
  for (auto& t : workers_) {
    t.join();
  }
}

template <typename Done> bool ThreadPool::spin_until(Done done) const {
  if (!spin_) {
    return done();
  }
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) {
        return true;
      }
      cpu_relax();
    }
    // The thread it waits for may share this CPU (another process took the other, or an
    // affinity mask holds both to one): spinning without yielding kept it off the CPU for the
    // whole spin, 1 ms a step with the two held to one CPU.
    std::this_thread::yield();
    if (std::chrono::steady_clock::now() >= until) {
      return done();
    }
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
    const auto started = [&] { return stop_.load() || generation_.load() != seen; };
    if (!spin_until(started)) {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, started);
    }
    if (stop_.load()) {
      return;
    }
    // fn_ and n_tasks_ were written before the generation moved (a sequentially consistent
    // atomic: seeing the new value sees them), and no new run starts before this one's end.
    seen = generation_.load();
    drain(worker);
    if (busy_.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(mu_); // the caller checks busy_ under mu_ before it waits
      done_cv_.notify_one();
    }
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
    busy_.store(int(workers_.size()));
    generation_.fetch_add(1);
  }
  start_cv_.notify_all();
  drain(0);
  const auto all_done = [&] { return busy_.load() == 0; };
  if (!spin_until(all_done)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, all_done);
  }
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = nullptr;
    err = error_;
  }
  if (err) {
    std::rethrow_exception(err);
  }
}

} // namespace attn
