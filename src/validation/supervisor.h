// Fault isolation: work runs in a forked worker process that the command supervises. The worker
// announces each unit (one checked run, or a phase such as building a reference) before it
// starts, in the typed messages of worker_protocol.h; when the worker dies, overruns a unit's
// deadline or sends a message that cannot be read, the unit is reported as a fault and a fresh
// worker carries on. The checked run (checked_run.h) is its one user.
#pragma once
#include <functional>
#include <string>

#include "src/validation/worker_protocol.h"

namespace attn {

struct SupervisorHooks {
  // Runs in each worker (a fork of this process, so it sees the supervisor's state as it was at
  // the fork); returns the worker's exit code. Exceptions it throws end the command in the
  // supervisor with the same type (InputError, DeviceUnavailable) or as an internal error; a
  // DeviceFault is the fault of the unit in flight. `worker` counts the workers started before.
  std::function<int(const Emit& emit, int worker)> work;
  // Every message but the units' brackets and the work's end (begin, end, return, exception).
  std::function<void(const WorkerMessage& msg)> on_message;
  // The run `run` ended its worker: `reason` says how (a signal, a CUDA error, a timeout, a
  // message that could not be read). The next worker starts after this returns.
  std::function<void(const RunIdentity& run, const std::string& reason)> on_fault;
  // A worker is replaced after a death that is no run's fault: outside any run (building a
  // problem, the reference), or killed from outside during one (that run is done again). `text`
  // says what happened. Unset: the text goes to on_message as a LogMsg.
  std::function<void(const std::string& text)> on_replaced;
  // How long a worker may sit stopped (SIGSTOP from outside) while no unit with a deadline is
  // open (building a problem, the reference, between runs) before it is taken for hung, killed
  // and replaced: a stopped process never goes on by itself. Inside a unit its deadline decides.
  double stopped_seconds = 10.0;
};

struct SupervisedRun {
  int exit_code = 0; // the last worker's
  int faults = 0;
  int workers = 0; // workers started
  // Set when the work returned but what came after it in the worker, the kernels' teardown (a
  // plugin's destroy), crashed, exited otherwise or hung: what it did. The results stand; the
  // command reports this and fails (exit 1).
  std::string teardown_failure;
};

// Runs hooks.work in workers until one returns. With `in_process` the work runs here instead
// (for debuggers and sanitizers that do not follow forks): messages go straight to the hooks and
// a fault ends the command.
[[nodiscard]] SupervisedRun supervise(const SupervisorHooks& hooks, bool in_process = false);

} // namespace attn
