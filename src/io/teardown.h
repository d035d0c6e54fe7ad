// Teardown a supervised worker defers to after its work: foreign code that releases what a
// plugin holds (its destroy) runs only once the worker has returned its results, so that a
// destroy that crashes, exits or hangs cannot take them with it; the supervisor then reports
// what the teardown did. Outside workers (attn-tune's own process, --in-process) nothing is
// deferred and teardown runs where it is asked for.
#pragma once
#include <functional>
#include <utility>
#include <vector>

namespace attn {

namespace detail {
struct DeferredTeardown {
  bool on = false;
  std::vector<std::function<void()>> steps;
};
inline DeferredTeardown& deferred_teardown() {
  static DeferredTeardown d;
  return d;
}
} // namespace detail

// Set in a worker before its work starts.
inline void defer_teardown_from_now() { detail::deferred_teardown().on = true; }

// Runs `step` now, or, in a worker, after its work has returned.
inline void teardown(std::function<void()> step) {
  auto& d = detail::deferred_teardown();
  if (d.on) {
    d.steps.push_back(std::move(step));
  } else {
    step();
  }
}

// The deferred steps, in the order they were asked for (the worker's last act).
inline void run_deferred_teardown() {
  auto& d = detail::deferred_teardown();
  std::vector<std::function<void()>> steps = std::move(d.steps);
  d.steps.clear();
  for (auto& s : steps) {
    s();
  }
}

} // namespace attn
