// The checked run's vocabulary: what a command asks of one run (check, time, both), which run it
// is, and what came of it. Plain data, sent from the worker to the supervisor
// (worker_protocol.h) and read by every command that runs kernels.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/backends/timing.h"
#include "src/model/kernel_config.h"
#include "src/validation/check.h"

namespace attn {

// passed: the output matched the reference when it was checked, and was timed when asked;
// failed: it did not match;
// skipped: the kernel set refused the configuration (can_run's reason); error: it could not be
// run (a throw, a plugin's error code); fault: it crashed or hung its worker process.
enum class RunStatus { passed, failed, skipped, error, fault };
[[nodiscard]] const char* run_status_name(RunStatus s);
[[nodiscard]] std::optional<RunStatus> parse_run_status(std::string_view s);

// What to do with one configuration on one problem: check it, time it, or both (the check
// first: a run that fails it is never timed).
struct RunRequest {
  bool check = true;                   // compare one launch with the reference
  std::optional<TimingOptions> timing; // time it (once it has passed, when checked)
  bool diagnose = false;               // on a failed check, say which usual mistake it looks like
  // Once the check has passed, the call again with its inputs rewritten in place
  // (PreparedRun::negate_inputs), checked against the negated reference: a kernel that keeps a
  // converted cache, a plan or an output keyed by its buffers' addresses answers with the data
  // of the call before, where an engine rewrites its cache and query there every decode step.
  bool rewritten_call = false;
};

// What the check found.
struct CheckFigures {
  CheckReport report;
  int rows_checked = 0;    // rows compared with the reference
  int rows_total = 0;      // rows the problem has
  bool lse_checked = true; // false when the family does not write lse
  // A failed check's clues (failure_map.h): where each listed mismatch's sequence ends against
  // the blocks and the partition or tile, and how the wrong rows spread over heads and
  // sequences.
  std::vector<std::string> where;
  std::string spread;
};

// Which run it is: what a fault must be charged to, and what the command needs back.
struct RunIdentity {
  std::string key;                    // unique within the command: what later workers skip
  std::optional<KernelConfig> config; // the configuration run (none for an engine's own answer)
  nlohmann::json context = nlohmann::json::object(); // the command's description of the run
};

struct CheckedRunResult {
  RunStatus status = RunStatus::error;
  std::string reason; // skipped: why; error: what went wrong; fault: how the worker ended
  std::optional<CheckFigures> check;
  std::optional<TimingResult> timing;
  std::vector<std::string> causes; // a failed output's likely mistakes (diagnose_failure)
  std::string saved;               // a file the run's output was written to
  double seconds = 0.0;            // wall time of the run, its reference included
  // The failure is the call after the inputs were rewritten (RunRequest::rewritten_call): its
  // problem is the subject's with negate_inputs applied. Known in the worker only.
  bool inputs_negated = false;
  // And its query halved and fp8 scales doubled besides (rescale_inputs). Worker only, too.
  bool inputs_rescaled = false;
};

} // namespace attn
