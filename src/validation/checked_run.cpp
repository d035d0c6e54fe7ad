#include "src/validation/checked_run.h"

#include <chrono>

#include "src/backends/deadline.h"
#include "src/model/errors.h"
#include "src/validation/diagnose.h"
#include "src/validation/failure_map.h"

namespace attn {

CheckSubject::CheckSubject(std::string name, Problem problem, std::vector<int> rows,
                           int reference_threads)
    : name_(std::move(name)), problem_(std::move(problem)), rows_(std::move(rows)),
      reference_threads_(reference_threads) {}

const Problem& CheckSubject::problem_in(KvLayout layout) {
  if (layout == problem_.kv_layout) {
    return problem_;
  }
  if (!relaid_ || relaid_->kv_layout != layout) {
    relaid_.reset(); // the old copy goes before the new one is made
    relaid_ = with_kv_layout(problem_, layout);
  }
  return *relaid_;
}

int64_t CheckSubject::bytes() const {
  int64_t n = 0;
  for (const Problem* p : {&problem_, relaid_ ? &*relaid_ : nullptr}) {
    if (p != nullptr) {
      n += p->input_bytes();
    }
  }
  return n;
}

const ReferenceResult& CheckSubject::reference(const WorkerLink& link) {
  if (!ref_) {
    link.begin_phase("reference of " + name_);
    ref_ = reference_attention(problem_, {reference_threads_, rows_});
    link.end();
  }
  return *ref_;
}

CheckFigures CheckSubject::check_answer(const WorkerLink& link, const HostTensor& out,
                                        const std::vector<float>* lse) {
  const ReferenceResult& ref = reference(link);
  return {check_output(out, lse, ref, tolerance()),
          rows_.empty() ? problem_.num_rows() : int(rows_.size()), problem_.num_rows(),
          lse != nullptr, {}, {}};
}

namespace {

// The layout the family of `cfg` reads its caches in (the problem's own where the set does not
// declare the family: prepare refuses it then).
KvLayout family_layout(const Backend& be, const KernelConfig& cfg, const Problem& pr) {
  const FamilyDecl* fam = be.declaration().family(cfg.family);
  return fam != nullptr ? fam->layout : pr.kv_layout;
}

} // namespace

CheckedRunResult checked_run(const WorkerLink& link, Backend& be, CheckSubject& subject,
                             const RunIdentity& run, const RunRequest& req, RunOutput* output) {
  const auto t0 = std::chrono::steady_clock::now();
  CheckedRunResult r;
  const Problem& pr = subject.problem();
  const KernelConfig cfg = run.config.value_or(KernelConfig{});
  const double deadline =
      unit_deadline_s(pr, be.info(), req.timing ? &*req.timing : nullptr, req.rewritten_call);
  link.begin_run(run, deadline);
  try {
    // can_run may load modules on a GPU or call a plugin: a crash there is this run's.
    if (auto why = be.can_run(cfg, pr)) {
      r.status = RunStatus::skipped;
      r.reason = *why;
    } else if (!req.check) {
      // Timing alone (the benchmark tools): no reference, no launch before the timing's own.
      auto prepared = be.prepare(subject.problem_in(family_layout(be, cfg, pr)), cfg);
      if (req.timing) {
        r.timing = prepared->time(*req.timing);
      }
      r.status = RunStatus::passed;
    } else {
      if (!subject.has_reference()) {
        link.end();
        (void)subject.reference(link);
        link.begin_run(run, deadline);
      }
      const ReferenceResult& ref = subject.reference(link);
      auto prepared = be.prepare(subject.problem_in(family_layout(be, cfg, pr)), cfg);
      const auto inputs_before = prepared->input_digests();
      prepared->poison_outputs();
      prepared->run();
      RunOutput got = prepared->download();
      // What the call changed of what it reads: "the query, the key cache".
      std::string inputs_written;
      const auto inputs_after = prepared->input_digests();
      for (std::size_t i = 0; i < inputs_before.size() && i < inputs_after.size(); ++i) {
        if (inputs_before[i].second != inputs_after[i].second) {
          inputs_written += (inputs_written.empty() ? "" : ", ") + inputs_before[i].first;
        }
      }
      const Tolerance tol = subject.tolerance();
      // One launch's figures against a reference (`values`: whether its values are right); memory
      // the caller owns written past out or lse is a failure, whatever the values.
      const auto figures = [&](const RunOutput& o, const ReferenceResult& want, bool& values) {
        CheckFigures f{check_output(o.out, o.checked_lse(), want, tol),
                       subject.rows().empty() ? pr.num_rows() : int(subject.rows().size()),
                       pr.num_rows(),
                       o.lse_written,
                       {},
                       {}};
        values = f.report.pass;
        if (!o.overrun.empty()) {
          f.report.overrun = o.overrun;
          f.report.pass = false;
        }
        return f;
      };
      bool values_right = false;
      CheckFigures fig = figures(got, ref, values_right);
      if (!inputs_written.empty()) {
        fig.report.inputs_written = inputs_written;
        fig.report.pass = false;
      }
      bool pass = fig.report.pass;
      r.check = std::move(fig);
      std::optional<ReferenceResult> negated; // the reference of the rewritten call
      if (pass && req.rewritten_call && prepared->negate_inputs()) {
        // And the fp8 scales, where there are both and the run can: an engine recalibrates
        // them in the same buffers (vLLM's calculate_kv_scales, on the first forward).
        const bool rescaled = prepared->rescale_inputs(false);
        negated = ref;
        for (double& x : negated->out) {
          x = rescaled ? -2.0 * x : -x;
        }
        prepared->poison_outputs();
        prepared->run();
        RunOutput again = prepared->download();
        bool values_again = false;
        CheckFigures fig2 = figures(again, *negated, values_again);
        if (rescaled) {
          (void)prepared->rescale_inputs(true);
        }
        (void)prepared->negate_inputs(); // back to the subject's problem, for the timing
        if (!fig2.report.pass) {
          pass = values_right = false;
          r.check = std::move(fig2);
          r.inputs_negated = true;
          r.inputs_rescaled = rescaled;
          // Within the tolerance of the first call's reference: the call before's answer.
          const bool stale = check_output(again.out, again.checked_lse(), ref, tol).pass;
          r.causes.push_back(
              std::string(rescaled
                              ? "after the query, the K/V cache and the fp8 scales were rewritten "
                                "in place (the same buffers and shapes, every element's sign "
                                "flipped, the query halved and k_scale and v_scale doubled, "
                                "which makes the exact output -2 times the first)"
                              : "after the query and the K/V cache were rewritten in place (the "
                                "same buffers and shapes, every element's sign flipped, which "
                                "negates the exact output)") +
              ", the answer is wrong: the kernel keeps something from the call before, keyed by "
              "its buffers (a converted copy of the cache, a plan, an output" +
              (rescaled ? ", the scales" : "") +
              "), where an engine rewrites them every decode step" +
              (stale ? "; it answered with the call before's output" : ""));
          got = std::move(again);
        }
      }
      const ReferenceResult& judged = r.inputs_negated ? *negated : ref;
      if (!pass) {
        r.status = RunStatus::failed;
        const std::vector<WrongPair> wrong = wrong_pairs(got.out, got.checked_lse(), judged, tol);
        const FailureMap map = map_failures(pr, cfg, r.check->report, wrong);
        r.check->where = map.where;
        r.check->spread = map.spread;
        if (req.diagnose && !values_right && !r.inputs_negated) {
          r.causes =
              diagnose_failure(be, cfg, pr, got, ref, tol, wrong, subject.reference_threads());
        }
        if (!inputs_written.empty()) {
          // One wording per set of inputs (the summary groups failures by it).
          r.causes.insert(r.causes.begin(),
                          "the kernel writes into its inputs (" + inputs_written +
                              " changed during the call): memory an engine reads again, the "
                              "cache at every later step" +
                              (values_right ? "; the values it wrote are right" : ""));
        }
        if (!got.overrun.empty()) {
          // One wording whatever the bytes (the summary groups failures by it).
          r.causes.insert(r.causes.begin(),
                          std::string("the kernel writes past the end of its output (out or lse): "
                                      "memory the caller owns") +
                              (values_right ? "; the values it wrote are right" : ""));
        }
      } else {
        if (req.timing) {
          r.timing = prepared->time(*req.timing);
        }
        r.status = RunStatus::passed;
      }
      if (output != nullptr) {
        *output = std::move(got);
      }
    }
  } catch (const DeviceUnavailable&) {
    throw;
  } catch (const DeviceFault&) {
    throw; // the worker ends; the supervisor charges this run a fault
  } catch (const std::exception& e) {
    // A check that was made stays with the result (a timing that threw after a pass).
    r.status = RunStatus::error;
    r.reason = e.what();
    r.timing.reset();
  }
  link.end();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

void prepare_logged(Backend& be, const std::vector<PlanItem>& items, const WorkerLink& link) {
  if (items.empty()) {
    return;
  }
  int shown_tenth = -1;
  be.prepare_plan(items, [&](int done, int total) {
    if (total == 0) {
      return;
    }
    if (const int tenth = done * 10 / total; tenth != shown_tenth) {
      shown_tenth = tenth;
      link.log("compiling " + std::to_string(total) + " kernels: " + std::to_string(done) + "/" +
               std::to_string(total));
    }
  });
}

CheckedRunResult checked_run_here(Backend& be, CheckSubject& subject, const KernelConfig& cfg,
                                  const RunRequest& req, RunOutput* output) {
  static const std::set<std::string> none;
  const WorkerLink link([](const WorkerMessage&) {}, none);
  return checked_run(link, be, subject, RunIdentity{cfg.key(), cfg, {}}, req, output);
}

SupervisedRun CheckedSession::run(bool in_process) {
  SupervisorHooks hooks;
  hooks.work = [this](const Emit& emit, int worker) {
    const WorkerLink link(emit, finished);
    return work(link, worker);
  };
  hooks.on_message = [this](const WorkerMessage& m) {
    if (const auto* say = std::get_if<SayMsg>(&m)) {
      if (on_say) {
        on_say(say->text);
      }
    } else if (const auto* log = std::get_if<LogMsg>(&m)) {
      if (on_log) {
        on_log(log->text);
      }
    } else if (const auto* opened = std::get_if<OpenedMsg>(&m)) {
      if (on_opened) {
        on_opened(*opened);
      }
    } else if (const auto* plan = std::get_if<PlanMsg>(&m)) {
      if (on_plan) {
        on_plan(*plan);
      }
    } else if (const auto* res = std::get_if<ResultMsg>(&m)) {
      finished.insert(res->run.key);
      if (on_result) {
        on_result(res->run, res->result);
      }
    }
  };
  hooks.on_replaced = [this](const std::string& text) {
    if (on_replaced) {
      on_replaced(text);
    } else if (on_log) {
      on_log(text);
    }
  };
  hooks.on_fault = [this](const RunIdentity& run, const std::string& reason) {
    finished.insert(run.key);
    CheckedRunResult r;
    r.status = RunStatus::fault;
    r.reason = reason;
    if (on_result) {
      on_result(run, r);
    }
  };
  return supervise(hooks, in_process);
}

} // namespace attn
