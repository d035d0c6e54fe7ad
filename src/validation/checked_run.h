// The checked run, attn-tune's central act: one kernel configuration of a kernel set on one
// problem, in a supervised worker process, checked against the reference and, when asked, timed
// once it has passed. Sweep, verify, `plugin check` and replay all run kernels through it and
// nothing else does: the worker side is checked_run() (and CheckSubject, which owns a problem's
// reference), the supervisor side is CheckedSession, which turns the worker's typed messages and
// its faults into one CheckedRunResult per run.
#pragma once
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "src/backends/backend.h"
#include "src/validation/check.h"
#include "src/validation/run_result.h"
#include "src/validation/supervisor.h"
#include "src/validation/worker_protocol.h"

namespace attn {

// A problem shared by the runs of its configurations, with its reference: built once in the
// worker, the reference computed on the first run that needs it, as a phase of its own (outside
// any run's fault unit, so that neither its time nor a failure in it is charged to a kernel).
class CheckSubject {
public:
  // `rows`: the query rows checked (empty: all); `reference_threads` 0: all hardware threads.
  CheckSubject(std::string name, Problem problem, std::vector<int> rows = {},
               int reference_threads = 0);
  [[nodiscard]] const std::string& name() const { return name_; }
  [[nodiscard]] const Problem& problem() const { return problem_; }
  // The problem in `layout`: the subject's own where it is in that layout, else a copy rearranged
  // on first use and kept for the configurations that follow (a kernel set that reads another
  // layout, as vLLM's CPU attention reads NHD, would otherwise have every run's prepare
  // rearrange the whole cache).
  [[nodiscard]] const Problem& problem_in(KvLayout layout);
  [[nodiscard]] const std::vector<int>& rows() const { return rows_; }
  // The memory its query and caches take, problem_in's copy included.
  [[nodiscard]] int64_t bytes() const;
  [[nodiscard]] int reference_threads() const { return reference_threads_; }
  [[nodiscard]] bool has_reference() const { return ref_.has_value(); }
  // The reference, computed now if it has not been, announced to the supervisor as a phase.
  [[nodiscard]] const ReferenceResult& reference(const WorkerLink& link);
  // The problem's tolerance (its dtype's).
  [[nodiscard]] Tolerance tolerance() const { return tolerance_for(problem_.params.dtype); }
  // An answer computed elsewhere (an engine's dumped out and lse) against the reference.
  [[nodiscard]] CheckFigures check_answer(const WorkerLink& link, const HostTensor& out,
                                          const std::vector<float>* lse);

private:
  std::string name_;
  Problem problem_;
  std::optional<Problem> relaid_; // problem_in's copy in another layout
  std::vector<int> rows_;
  int reference_threads_ = 0;
  std::optional<ReferenceResult> ref_;
};

// Runs `run.config` of `be` on the subject's problem in a fault unit of the worker: can_run (a
// refusal is `skipped` with its reason), the reference (a phase), one launch with poisoned
// outputs checked against it (`failed` with the figures, and the likely mistakes when
// req.diagnose), with req.rewritten_call a second launch after the run's inputs are rewritten in
// place (PreparedRun::negate_inputs; `failed` with that cause, inputs_negated set), then the
// timing when req.timing is set (`passed` with the samples); with
// req.check false only the timing (no reference, no check); anything
// thrown is `error` with its message. A DeviceFault is rethrown: the worker ends, and the
// supervisor charges the run a fault. `output`, when given, receives the kernel's output. The
// result is returned, not reported: the caller records it, then calls link.result.
[[nodiscard]] CheckedRunResult checked_run(const WorkerLink& link, Backend& be,
                                           CheckSubject& subject, const RunIdentity& run,
                                           const RunRequest& req, RunOutput* output = nullptr);

// Has the backend build every pair's kernels before the first run (prepare_plan: the CUDA backend
// compiles them on all cores instead of one by one inside the runs), logging "compiling N
// kernels: i/N" at every tenth and at the end.
void prepare_logged(Backend& be, const std::vector<PlanItem>& items, const WorkerLink& link);

// The same run in this process, unsupervised, for the benchmark tools (bench_cpu and the device
// measurements): a crash there ends the tool, and nothing is reported anywhere.
[[nodiscard]] CheckedRunResult checked_run_here(Backend& be, CheckSubject& subject,
                                                const KernelConfig& cfg, const RunRequest& req,
                                                RunOutput* output = nullptr);

// The supervisor's side: runs `work` in supervised workers (or in this process), hands each
// run's result to on_result as it arrives, a crashed or hung run's as a `fault` with its reason,
// and the other messages to their hooks. Every reported or faulted run's key joins `finished`,
// which the next worker sees at its fork (WorkerLink::finished); a command may add keys of its
// own (a family a crash ends).
class CheckedSession {
public:
  std::function<int(const WorkerLink& link, int worker)> work;
  std::function<void(const RunIdentity& run, const CheckedRunResult& r)> on_result;
  std::function<void(const OpenedMsg& m)> on_opened;
  std::function<void(const PlanMsg& m)> on_plan;
  std::function<void(const std::string& text)> on_log;
  std::function<void(const std::string& text)> on_say;
  // A worker replaced after a death that is no run's fault (outside any run, or killed from
  // outside during one), with why; unset, the line goes to on_log.
  std::function<void(const std::string& text)> on_replaced;
  std::set<std::string> finished;

  SupervisedRun run(bool in_process);
};

} // namespace attn
