#include "src/validation/plugin_check.h"

#include <set>

#include "src/backends/registry.h"
#include "src/model/problem_gen.h"
#include "src/validation/checked_run.h"

namespace attn {

using nlohmann::json;

namespace {

// The tiny cases of a family: first causal only, then with a sliding window, then with a soft
// cap, so that a failure says which part of the mask is wrong.
struct TinyCase {
  std::string what;
  Problem problem;
};

std::vector<TinyCase> tiny_cases(Family f) {
  std::vector<TinyCase> out;
  for (int variant = 0; variant < 3; ++variant) {
    AttnParams p;
    p.num_heads = 4;
    p.num_kv_heads = 2;
    p.head_dim = 64;
    p.block_size = 16;
    p.dtype = DType::f16;
    std::string what = "causal";
    if (variant == 1) {
      p.window_left = 25;
      what = "causal, window_left=25";
    } else if (variant == 2) {
      p.softcap = 30.0;
      p.scale = 1.0;
      what = "causal, softcap=30, scale=1";
    }
    GenOptions g;
    g.seed = 7 + uint64_t(variant);
    out.push_back({what, f == Family::prefill ? make_prefill_problem(p, {3, 17}, {3, 40}, g)
                                              : make_decode_problem(p, {1, 17, 600}, g)});
  }
  return out;
}

// Runs every case of every family not finished: for each, the configurations in declaration
// order until one is accepted, and reports that run's result (or, when every configuration
// refuses, a `skipped` result with the refusals).
int check_worker(Backend& be, const WorkerLink& link) {
  for (const FamilyDecl& f : be.declaration().families) {
    const std::string fam = family_name(f.family);
    if (link.finished(fam)) {
      continue;
    }
    const std::vector<TinyCase> cases = tiny_cases(f.family);
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const TinyCase& c = cases[i];
      const std::string case_key = fam + " #" + std::to_string(i);
      if (link.finished(case_key)) {
        continue;
      }
      CheckSubject subject(fam + " " + c.what, c.problem, {}, /*reference_threads=*/1);
      const json ctx = {
          {"family", fam}, {"what", c.what}, {"plain", i == 0}, {"problem", c.problem.describe()}};
      std::string refusals;
      bool ran = false;
      for (const KernelConfig& k : be.config_space(f.family, c.problem.params)) {
        RunIdentity run{case_key + " " + k.key(), k, ctx};
        run.context["config"] = k.key();
        const CheckedRunResult r = checked_run(link, be, subject, run, RunRequest{});
        if (r.status == RunStatus::skipped) {
          refusals += "\n      " + k.key() + ": " + r.reason;
          continue;
        }
        run.key = case_key;
        link.result(run, r);
        ran = true;
        break;
      }
      if (!ran) {
        CheckedRunResult none;
        none.status = RunStatus::skipped;
        none.reason = refusals;
        link.result(RunIdentity{case_key, std::nullopt, ctx}, none);
      }
    }
  }
  return 0;
}

// The line a case's result prints.
std::string case_line(const json& ctx, const CheckedRunResult& r, bool& failed) {
  const std::string what = ctx.value("what", "");
  const std::string config = ctx.value("config", "");
  switch (r.status) {
  case RunStatus::skipped: {
    // Plain causal attention is the least a family must run; the masks may be refused.
    const bool plain = ctx.value("plain", false);
    failed = plain;
    return std::string(plain ? "FAIL" : "skipped") + " (" + what + "): no configuration accepts " +
           ctx.value("problem", "") + r.reason;
  }
  case RunStatus::passed:
  case RunStatus::failed: {
    failed = r.status == RunStatus::failed;
    const bool lse = r.check && r.check->lse_checked;
    return std::string(failed ? "FAIL: wrong results" : "ok") + " (" + what + ") with " + config +
           ": " + (r.check ? r.check->report.summary() : std::string()) +
           (lse ? "" : " (lse not checked: the family does not write it)");
  }
  case RunStatus::error:
    failed = true;
    return "FAIL (" + what + ") with " + config + ": " + r.reason;
  case RunStatus::fault:
    break;
  }
  failed = true;
  return "FAIL: the plugin crashed the process: " + r.reason;
}

} // namespace

PluginCheckResult check_plugin(const PluginLibrary& lib, const std::string& spec,
                               const BackendOptions& bo, bool in_process,
                               const std::function<void(const std::string&)>& print) {
  std::set<std::string> failed_families;
  CheckedSession session;
  session.work = [&](const WorkerLink& link, int) {
    auto be = make_backend(spec, bo);
    return check_worker(*be, link);
  };
  session.on_result = [&](const RunIdentity& run, const CheckedRunResult& r) {
    const std::string fam = run.context.value("family", "?");
    bool failed = false;
    print("  " + fam + ": " + case_line(run.context, r, failed));
    if (r.status == RunStatus::fault) {
      session.finished.insert(fam); // a crash ends the family's check
    }
    if (failed) {
      failed_families.insert(fam);
    }
  };
  const SupervisedRun run = session.run(in_process);
  (void)run;
  return {int(lib.families().size()), int(failed_families.size())};
}

} // namespace attn
