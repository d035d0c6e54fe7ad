// `attn-tune verify`, the correctness gate: every case of verify_cases.h on every configuration
// a kernel set offers, each a checked run (checked_run.h), tallied per device and JUnit testcase.
#include "src/validation/verify.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "src/io/safetensors.h"
#include "src/io/stop_signals.h"
#include "src/validation/checked_run.h"
#include "src/validation/kernel_targets.h"
#include "src/validation/replay.h"
#include "src/validation/verify_cases.h"

namespace attn {

using nlohmann::json;

namespace {

std::string slug(const std::string& s) {
  std::string o;
  for (char c : s) {
    o += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') ? c : '_';
  }
  return o;
}

std::string fail_prefix(const json& ctx, uint64_t run_seed) {
  return "FAIL " + ctx.value("device", "") + " " + ctx.value("config", "") + " " +
         ctx.value("case", "") +
         " case_seed=" + std::to_string(ctx.value("case_seed", uint64_t(0))) +
         " run_seed=" + std::to_string(run_seed);
}

// The one line a failed, erroneous or faulted case prints.
std::string failure_line(const json& ctx, const CheckedRunResult& r, uint64_t run_seed) {
  if (r.status == RunStatus::fault) {
    return fail_prefix(ctx, run_seed) + ": fault: " + r.reason;
  }
  if (r.status == RunStatus::error || !r.check) {
    return fail_prefix(ctx, run_seed) + ": error: " + r.reason;
  }
  const CheckReport& rep = r.check->report;
  std::ostringstream s;
  s << fail_prefix(ctx, run_seed) << " (" << ctx.value("problem", "") << "): " << rep.summary();
  for (std::size_t k = 0; k < rep.first.size() && k < 3; ++k) {
    const Mismatch& m = rep.first[k];
    char buf[160];
    if (m.dim >= 0) {
      std::snprintf(buf, sizeof buf, "; out[%d,%d,%d] got %.6g want %.6g (%s", m.row, m.head,
                    m.dim, m.got, m.want, m.what.c_str());
    } else {
      std::snprintf(buf, sizeof buf, "; lse[%d,%d] got %.9g want %.9g (%s", m.row, m.head, m.got,
                    m.want, m.what.c_str());
    }
    s << buf;
    // Where the row's sequence ends, once per row.
    if (k < r.check->where.size() && (k == 0 || rep.first[k - 1].row != m.row)) {
      s << "; " << r.check->where[k];
    }
    s << ")";
  }
  if (!r.check->spread.empty()) {
    s << "; " << r.check->spread;
  }
  for (std::size_t i = 0; i < r.causes.size(); ++i) {
    s << (i == 0 ? "; looks like: " : "; ") << r.causes[i];
  }
  if (!r.saved.empty()) {
    s << "; dumped to " << r.saved;
  }
  return s.str();
}

// What identifies one check in a run, so that a later worker does not repeat it.
// Said by a worker whose failure dump could not be written (followed by why), and then the key
// that tells workers not to dump any more.
constexpr const char* kDumpsStopped = "(failure dumps stopped) ";

// The reason given for each case of such a configuration, which the totals count as not run.
constexpr const char* kNotRun = "not run: its configuration hung on earlier cases";

// The key that tells workers a configuration is not to be run on its device any more.
std::string abandoned_key(const std::string& device, const std::string& config) {
  return "abandoned|" + device + "|" + config;
}

std::string check_key(const std::string& device, const KernelConfig& cfg, const VerifyCase& c) {
  return device + " | " + cfg.key() + " | " + c.name();
}

// What a run's result says of the case it checked (the tally reads it back).
json case_context(const std::string& device, Family f, const KernelConfig& cfg,
                  const VerifyCase& c) {
  return {{"device", device}, {"family", family_name(f)}, {"config", cfg.key()},
          {"group", c.group}, {"case", c.name()},         {"case_seed", c.seed}};
}

// Writes a failed case with the kernel's answer as a replay file; its path.
std::string dump_failure(const Backend& be, const VerifyOptions& opt, const std::string& device,
                         const KernelConfig& cfg, const VerifyCase& c, const Problem& pr,
                         const RunOutput& out, bool rewritten, bool rescaled) {
  const std::string path =
      opt.dump_dir + "/" + slug(device + "_" + cfg.key() + "_" + c.name()) + ".safetensors";
  std::map<std::string, std::string> meta = {
      {"attn_tune_case", c.name()},
      {"attn_tune_config", cfg.key()},
      {"attn_tune_kernels", be.kernels().value("name", "attn-tune")},
      {"attn_tune_device", device},
      {"attn_tune_run_seed", std::to_string(opt.seed)}};
  if (rewritten) { // the second call's: its inputs rewritten in place after a first that passed
    meta["attn_tune_rewritten_call"] =
        std::string("after a first call that passed, the inputs negated in place") +
        (rescaled ? ", the query halved and the fp8 scales doubled" : "");
  }
  SafetensorsFile file = replay_to_safetensors(pr, &out.out, out.checked_lse());
  file.metadata.insert(meta.begin(), meta.end());
  write_safetensors(path, file);
  return path;
}

// A problem as a failure line names it: its description, and an fp8 cache's scales (a mistake
// with one, "k_scale is ignored", reads differently where v_scale is 1).
std::string problem_words(const Problem& pr) {
  const std::string scales = fp8_scale_words(pr);
  return pr.describe() + (scales.empty() ? "" : "; " + scales);
}

// The fp8 format of a case's caches when family f of `be` declares that it reads it (a
// declaration VerifyTally::judge_declarations holds it to); empty otherwise.
std::string declared_fp8(const Backend& be, Family f, const AttnParams& p) {
  const FamilyDecl* fam = be.declaration().family(f);
  if (!p.fp8_cache() || fam == nullptr || !fam->reads_kv(p.cache_dtype())) {
    return "";
  }
  return std::string(dtype_name(p.cache_dtype()));
}

// A verify worker's pass over one kernel set: every case of every family and configuration
// that earlier workers of this command have not checked, each a checked run.
void verify_worker(Backend& be, const VerifyOptions& opt, const WorkerLink& link) {
  const std::string device = be.info().id;
  link.opened(be);
  if (!opt.dump_dir.empty()) {
    std::filesystem::create_directories(opt.dump_dir);
  }
  RunRequest req;
  req.diagnose = true;
  // The configuration and case group pairs whose call was made again with its inputs rewritten
  // in place (RunRequest::rewritten_call): once per pair, on its first passed case. State kept
  // between calls is the kernel's, not a case's, and the second call would add two thirds to
  // the time verify takes over the built-in CPU kernels.
  std::set<std::string> rewritten;
  for (DType dt : opt.dtypes) {
    for (Phase phase : {Phase::decode, Phase::prefill}) {
      std::vector<Family> fams;
      for (Family f : opt.families) {
        if (family_is_decode(f) == (phase == Phase::decode)) {
          fams.push_back(f);
        }
      }
      if (fams.empty()) {
        continue;
      }
      // can_run on small problems of each candidate size: a crash there is the set's, named by
      // this phase, not a case's.
      link.begin_kernel_phase(std::string("asking ") + device + " which block and head sizes its " +
                                  phase_name(phase) + " kernels accept",
                              kKernelPhaseSeconds);
      const KernelTargets aim = kernel_targets(be, phase, dt);
      link.end();
      for (const std::string& note : aim.contract_notes) {
        link.say("verify: note: " + device + " " + note);
      }
      // What is left to check, case by case (an earlier worker's runs are not repeated), and
      // every kernel that needs built before the first run.
      std::vector<std::pair<VerifyCase, std::vector<std::pair<Family, KernelConfig>>>> work;
      for (const VerifyCase& c : verify_cases(phase, dt, opt.intensity, opt.seed, aim)) {
        const bool selected =
            c.params.fp8_cache()
                ? std::find(opt.fp8.begin(), opt.fp8.end(), c.params.cache_dtype()) != opt.fp8.end()
                : opt.plain_cache;
        if (!selected) {
          continue; // not among --kv-dtypes
        }
        std::vector<std::pair<Family, KernelConfig>> todo;
        for (Family f : fams) {
          for (const KernelConfig& cfg : be.config_space(f, c.params)) {
            const std::string key = check_key(device, cfg, c);
            if (link.finished(key)) {
              continue;
            }
            if (!link.finished(abandoned_key(device, cfg.key()))) {
              todo.emplace_back(f, cfg);
              continue;
            }
            // A case of a configuration given up on after its hangs: counted as not run, so that
            // the totals still add up to every case of the gate.
            CheckedRunResult r;
            r.status = RunStatus::skipped;
            r.reason = kNotRun;
            json ctx = case_context(device, f, cfg, c);
            ctx["not_run"] = true;
            link.result(RunIdentity{key, cfg, std::move(ctx)}, r);
          }
        }
        if (!todo.empty()) {
          work.emplace_back(c, std::move(todo));
        }
      }
      std::vector<PlanItem> plan;
      for (const auto& [c, todo] : work) {
        for (const auto& [f, cfg] : todo) {
          plan.push_back({c.params, cfg});
        }
      }
      link.begin_phase(std::string("building the ") + phase_name(phase) + " kernels of " +
                       std::to_string(work.size()) + " cases");
      prepare_logged(be, plan, link);
      link.end();
      for (const auto& [c, todo] : work) {
        CheckSubject subject(c.name(), c.make(), {}, opt.reference_threads);
        for (const auto& [f, cfg] : todo) {
          json ctx = case_context(device, f, cfg, c);
          ctx["probed_size"] = c.probed_size;
          ctx["declared_kv"] = declared_fp8(be, f, c.params);
          ctx["problem"] = problem_words(subject.problem());
          const RunIdentity run{check_key(device, cfg, c), cfg, std::move(ctx)};
          RunOutput out;
          const std::string pair = cfg.key() + " | " + c.group;
          RunRequest rq = req;
          rq.rewritten_call = !rewritten.contains(pair);
          CheckedRunResult r = checked_run(link, be, subject, run, rq, &out);
          if (rq.rewritten_call && (r.status == RunStatus::passed || r.inputs_negated)) {
            rewritten.insert(pair);
          }
          if (r.status == RunStatus::failed && !opt.dump_dir.empty() &&
              !link.finished(kDumpsStopped)) {
            // A dump that cannot be written (a full disk) stops the dumping, said once; the
            // failure stands as judged, with its diagnosis.
            try {
              // A rewritten call's failure: the problem it was judged on, negated (a copy only
              // then: the caches can be large).
              std::optional<Problem> negated;
              if (r.inputs_negated) {
                negate_inputs(negated.emplace(subject.problem()));
                if (r.inputs_rescaled) {
                  (void)rescale_inputs(*negated, false);
                }
              }
              r.saved =
                  dump_failure(be, opt, device, cfg, c, negated ? *negated : subject.problem(), out,
                               r.inputs_negated, r.inputs_rescaled);
            } catch (const std::exception& e) {
              link.say(std::string(kDumpsStopped) + e.what());
            }
          }
          link.result(run, r);
        }
      }
    }
  }
}

// A configuration that hung this many cases (each costing its whole deadline) is not run on the
// rest: a kernel that hangs would otherwise hold verify for a deadline per case (half an hour at
// quick intensity with a 10 s deadline). plugin check stops a family after as many crashes.
constexpr int kHangsPerConfig = 3;

// Whether `r` is a hang: the supervisor stopped its run at the deadline.
bool is_hang(const CheckedRunResult& r) {
  return r.status == RunStatus::fault && r.reason.starts_with("timeout:");
}

// The supervisor's side of verify: one report per device, built from the runs' results (faults
// included), with each failure printed to `log` as it arrives.
class VerifyTally {
public:
  VerifyTally(const VerifyOptions& opt, std::FILE* log) : opt_(opt), log_(log) {}

  [[nodiscard]] std::vector<VerifyReport>& reports() { return reports_; }

  void opened(const std::string& device) { (void)report(device); }

  // Whether `r` was the kHangsPerConfig-th hang of its configuration on its device: then the
  // configuration's testcase says its other cases were not run.
  [[nodiscard]] bool gives_up_after(const RunIdentity& run, const CheckedRunResult& r) {
    if (!is_hang(r)) {
      return false;
    }
    const json& ctx = run.context;
    const std::string device = ctx.value("device", "");
    const std::string config = ctx.value("config", "");
    if (++hangs_[device + "|" + config] != kHangsPerConfig) {
      return false;
    }
    const std::string line = "FAIL " + device + " " + config +
                             ": its other cases not run: it hung " +
                             std::to_string(kHangsPerConfig) + " cases (each its whole deadline)";
    VerifyReport& rep = report(device);
    for (VerifyTestcase& tc : rep.testcases) {
      if (tc.config == config) {
        tc.failures.push_back(line);
        break;
      }
    }
    if (log_) {
      std::fprintf(log_, "%s\n", line.c_str());
      std::fflush(log_);
    }
    return true;
  }

  void apply(const RunIdentity& run, const CheckedRunResult& r) {
    const json& ctx = run.context;
    if (r.status == RunStatus::skipped && ctx.value("probed_size", false)) {
      return; // a block size verify tried on its own account, refused: not the kernel's miss
    }
    const std::string device = ctx.value("device", "");
    VerifyReport& rep = report(device);
    const std::string config = ctx.value("config", "");
    const std::string group = ctx.value("group", "");
    const std::string tkey = device + "|" + config + "|" + group;
    auto it = testcase_.find(tkey);
    if (it == testcase_.end()) {
      it = testcase_.emplace(tkey, rep.testcases.size()).first;
      VerifyTestcase tc;
      tc.device = device;
      tc.family = ctx.value("family", "");
      tc.config = config;
      tc.group = group;
      rep.testcases.push_back(std::move(tc));
    }
    VerifyTestcase& tc = rep.testcases[it->second];
    tc.seconds += r.seconds;
    if (const std::string kv = ctx.value("declared_kv", ""); !kv.empty()) {
      DeclaredUse& use = declared_[{device, tc.family, kv}];
      if (r.status == RunStatus::skipped) {
        use.refused.insert(ctx.value("case", ""));
        if (use.refusal.empty()) {
          use.refusal = config + ": " + r.reason;
        }
      } else {
        use.ran = true;
      }
    }
    if (r.status == RunStatus::skipped && ctx.value("not_run", false)) {
      ++tc.not_run;
      ++rep.not_run;
      if (tc.skip_reason.empty()) {
        tc.skip_reason = r.reason; // what JUnit says of a testcase with no case run
      }
      return;
    }
    if (r.status == RunStatus::skipped) {
      ++tc.skipped;
      ++rep.skipped;
      tc.skip_reason = r.reason;
      return;
    }
    if (r.status == RunStatus::passed) {
      ++tc.passed;
      ++rep.passed;
      if (r.check && r.check->report.checked >= 64 &&
          r.check->report.short_by_half_ulp + r.check->report.long_by_half_ulp > 0) {
        auto& [truncated, of] = rounding_[device + " " + config];
        truncated += r.check->report.rounds_toward_zero() ? 1 : 0;
        ++of;
      }
      return;
    }
    ++tc.failed;
    ++rep.failed;
    const std::string failure = failure_line(ctx, r, opt_.seed);
    tc.failures.push_back(failure);
    if (r.status == RunStatus::failed) {
      for (const auto& cause : r.causes) {
        ++tc.causes[cause];
      }
    } else {
      ++tc.faults;
      // Errors and faults are their own explanation: counted by their message.
      std::string why =
          std::string(r.status == RunStatus::fault ? "fault: " : "error: ") + r.reason;
      // "error: plugin NAME run failed (code N): message": the summary keeps the message.
      const auto run_failed = why.find(" run failed (code ");
      if (why.rfind("error: plugin ", 0) == 0 && run_failed != std::string::npos) {
        const auto colon = why.find("): ", run_failed);
        if (colon != std::string::npos) {
          why = "error: " + why.substr(colon + 3);
        }
      }
      // Each hang's deadline comes from its own case's expected time, so the seconds differ from
      // case to case: the summary counts hangs as one cause (each case's line keeps its seconds).
      if (is_hang(r)) {
        why = "fault: timeout: no result within the case's deadline (from its expected time)";
      }
      if (why.size() > 300) {
        why = why.substr(0, 297) + "...";
      }
      ++tc.causes[why];
    }
    if (!r.saved.empty()) {
      rep.dumped.push_back(r.saved);
    }
    if (log_) {
      std::fprintf(log_, "%s\n", failure.c_str());
      std::fflush(log_);
    }
  }

  // A family that declares an fp8 format (a plugin's kv_dtypes, a module's) and whose every
  // configuration refused every case of it: the declaration promises those caches, so the gate
  // fails rather than passing with them all skipped. One failure per family and format, in a
  // testcase of its own.
  void judge_declarations() {
    for (const auto& [which, use] : declared_) {
      if (use.ran) {
        continue;
      }
      const auto& [device, family, kv] = which;
      const std::string line = "FAIL " + device + " " + family + ": it declares " + kv +
                               " KV caches, yet every configuration refused all " +
                               std::to_string(use.refused.size()) + " " + kv +
                               " cases (the first: " + use.refusal + ")";
      VerifyReport& rep = report(device);
      VerifyTestcase tc;
      tc.device = device;
      tc.family = family;
      tc.config = family + " (declaration)";
      tc.group = kv + " caches";
      tc.failed = 1;
      tc.failures.push_back(line);
      ++tc.causes["declares " + kv + " KV caches but refuses every call with one"];
      rep.testcases.push_back(std::move(tc));
      ++rep.failed;
      if (log_) {
        std::fprintf(log_, "%s\n", line.c_str());
        std::fflush(log_);
      }
    }
  }

  // A note per configuration whose passed 16-bit outputs look truncated toward zero in most of
  // its cases: within the tolerance (SPEC.md judges the error), so no failure, but an engine's
  // final conversion that truncates doubles its error and biases every output toward zero.
  void note_rounding(std::FILE* to) const {
    for (const auto& [which, counts] : rounding_) {
      const auto& [truncated, of] = counts;
      if (truncated * 2 > of) {
        std::fprintf(to,
                     "verify: note: %s: its 16-bit outputs are rounded toward zero in %d of %d "
                     "passed cases (a fifth or more of the elements short of the reference by over "
                     "half an ulp, almost none long): the final conversion truncates instead of "
                     "rounding to nearest even; within the tolerance, but twice the error and "
                     "biased\n",
                     which.c_str(), truncated, of);
      }
    }
  }

private:
  VerifyReport& report(const std::string& device) {
    auto it = by_device_.find(device);
    if (it == by_device_.end()) {
      it = by_device_.emplace(device, reports_.size()).first;
      reports_.emplace_back();
    }
    return reports_[it->second];
  }

  const VerifyOptions& opt_;
  std::FILE* log_;
  std::vector<VerifyReport> reports_;
  std::map<std::string, std::size_t> by_device_;
  std::map<std::string, std::size_t> testcase_; // device|config|group -> its testcase
  std::map<std::string, std::pair<int, int>> rounding_; // "device config" -> truncated, of
  std::map<std::string, int> hangs_;            // device|config -> cases that timed out
  struct DeclaredUse {
    bool ran = false;              // a configuration ran a case (passed, failed or faulted)
    std::set<std::string> refused; // cases a configuration refused
    std::string refusal;           // the first refusal: "configuration: reason"
  };
  // (device, family, fp8 format the family declares) -> how its cases went
  std::map<std::tuple<std::string, std::string, std::string>, DeclaredUse> declared_;
};

} // namespace

std::vector<VerifyReport> run_verify_isolated(const VerifyBackends& backends,
                                              const VerifyOptions& opt, std::FILE* log,
                                              std::FILE* info, bool in_process) {
  VerifyTally tally(opt, log);
  std::set<std::string> said;
  CheckedSession session;
  session.work = [&](const WorkerLink& link, int) {
    backends(link, [&](Backend& be) { verify_worker(be, opt, link); });
    return 0;
  };
  session.on_opened = [&](const OpenedMsg& m) { tally.opened(m.device.id); };
  session.on_result = [&](const RunIdentity& run, const CheckedRunResult& r) {
    tally.apply(run, r);
    if (tally.gives_up_after(run, r)) {
      session.finished.insert(
          abandoned_key(run.context.value("device", ""), run.context.value("config", "")));
    }
  };
  // A worker replaced after a death outside any case (or a kill from outside) says so; the
  // verdict does not depend on it, so it goes where the warnings go.
  session.on_replaced = [](const std::string& text) {
    std::fprintf(stderr, "verify: note: %s\n", text.c_str());
  };
  session.on_say = [&](const std::string& text) {
    if (text.starts_with(kDumpsStopped)) {
      if (session.finished.insert(kDumpsStopped).second) {
        std::fprintf(stderr,
                     "verify: warning: --dump-failures stopped: %s; the failures after it are "
                     "judged but not dumped\n",
                     text.substr(std::string(kDumpsStopped).size()).c_str());
      }
      return;
    }
    if (info != nullptr && said.insert(text).second) {
      std::fprintf(info, "%s\n", text.c_str());
      std::fflush(info);
    }
  };
  SupervisedRun run;
  int stopped_by = 0;
  std::string stopped;   // "stopped by SIGTERM"
  std::string in_flight; // the case running then ("device | configuration | case"), if any
  try {
    run = session.run(in_process);
  } catch (const StopRequested& stop) {
    stopped_by = stop.sig;
    stopped = stop.what();
    in_flight = stop.unit;
  }
  if (stopped_by == 0) {
    tally.judge_declarations(); // (a stopped run did not see every case)
  }
  tally.note_rounding(stderr);
  std::vector<VerifyReport> reports = std::move(tally.reports());
  if (stopped_by != 0) {
    if (reports.empty()) {
      reports.emplace_back();
    }
    VerifyReport& first = reports.front();
    first.stopped_by = stopped_by;
    VerifyTestcase stop;
    stop.device = first.testcases.empty() ? "none" : first.testcases.front().device;
    stop.family = "verify";
    stop.config = "interrupted";
    stop.group = "(" + stopped + ")";
    stop.failed = 1;
    stop.faults = 1;
    stop.interruption = true;
    stop.failures.push_back(
        stopped +
        " before every case ran: the testcases here are the ones "
        "that finished" +
        (in_flight.empty() ? std::string() : "; running then, not judged: " + in_flight));
    first.testcases.push_back(std::move(stop));
  }
  if (!run.teardown_failure.empty()) {
    if (reports.empty()) {
      reports.emplace_back();
    }
    reports.front().teardown_failure = run.teardown_failure;
  }
  return reports;
}

VerifyReport run_verify(Backend& be, const VerifyOptions& opt, std::FILE* log) {
  std::vector<VerifyReport> reports = run_verify_isolated(
      [&](const WorkerLink&, const std::function<void(Backend&)>& each) { each(be); }, opt, log,
      /*info=*/nullptr, /*in_process=*/true);
  return reports.empty() ? VerifyReport{} : std::move(reports.front());
}

} // namespace attn
