// Fault isolation: work runs in a forked worker process that the command supervises. The worker
// announces each unit (one measurement, one checked case) before it starts; when the worker dies
// or a unit overruns its deadline, the unit is reported as a fault and a fresh worker carries on.
#pragma once
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace attn {

// How the worker talks to its supervisor: one JSON object per message. Messages with "ev" set to
// "begin" or "end" bracket a unit; the rest go to the supervisor's on_message.
using Emit = std::function<void(const nlohmann::json&)>;

// The "begin" message of a unit: `key` names it, `deadline_s` is how long it may take before it
// counts as hung, `info` is what on_fault needs to record it. A unit with `fault_unit` false is
// a phase between units (building a reference, compiling): dying in it is not any
// configuration's fault, and the supervisor gives up after repeated deaths there.
[[nodiscard]] nlohmann::json begin_message(const std::string& key, double deadline_s,
                                           const nlohmann::json& info, bool fault_unit = true);
[[nodiscard]] nlohmann::json end_message();

struct SupervisorHooks {
  // Runs in each worker (a fork of this process, so it sees the supervisor's state as it was at
  // the fork); returns the worker's exit code. Exceptions it throws end the command in the
  // supervisor with the same type (InputError, DeviceUnavailable) or as an internal error; a
  // DeviceFault is the fault of the unit in flight. `worker` counts the workers started before.
  std::function<int(const Emit& emit, int worker)> work;
  std::function<void(const nlohmann::json& msg)> on_message;
  // The unit `info` (from its begin message) ended its worker: `reason` says how (a signal, a
  // CUDA error, a timeout). The next worker starts after this returns.
  std::function<void(const nlohmann::json& info, const std::string& reason)> on_fault;
};

struct SupervisedRun {
  int exit_code = 0; // the last worker's
  int faults = 0;
  int workers = 0; // workers started
};

// Runs hooks.work in workers until one returns. With `in_process` the work runs here instead
// (for debuggers and sanitizers that do not follow forks): messages go straight to the hooks and
// a fault ends the command.
[[nodiscard]] SupervisedRun supervise(const SupervisorHooks& hooks, bool in_process = false);

// "killed by SIGSEGV (segmentation fault)", "exited with status 3": what a wait status means.
[[nodiscard]] std::string describe_wait_status(int status);

} // namespace attn
