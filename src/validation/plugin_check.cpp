#include "src/validation/plugin_check.h"

#include <algorithm>
#include <map>
#include <set>

#include "src/backends/registry.h"
#include "src/model/problem_gen.h"
#include "src/validation/checked_run.h"
#include "src/validation/kernel_targets.h"

namespace attn {

using nlohmann::json;

namespace {

// A family's crashes after which its check stops (each one restarts the worker).
constexpr int kCrashesPerFamily = 3;

// The tiny cases of a family: first causal only, then with a sliding window, then with a soft
// cap that bends the scores without making the softmax one-hot (default scale, cap 2), so that a
// failure says which part of the mask is wrong. Decode lengths cross a block edge and, for
// decode_v2, the boundary of every declared partition. A family that reads fp8 caches gets two
// causal cases per fp8 dtype it declares, with scales far from 1 and unlike each other (SPEC.md
// "fp8 KV caches"): per-tensor ones, then per-KV-head ones.
struct TinyCase {
  std::string what;
  Problem problem;
  // Plain causal attention, the least the family must run: every configuration refusing it is
  // a failure; the other cases may be refused.
  bool plain = false;
  // The fp8 format of the case's caches (empty for fp16 ones).
  std::string fp8;
};

std::vector<TinyCase> tiny_cases(const FamilyDecl& f) {
  std::vector<int> lens = {1, 17, 600};
  for (const ParamSpace& p : f.params) {
    if (p.name == "partition") {
      for (int part : p.values) {
        if (part > 0 && part <= 8192) {
          lens.insert(lens.end(), {part, part + 1});
        }
      }
    }
  }
  std::sort(lens.begin(), lens.end());
  lens.erase(std::unique(lens.begin(), lens.end()), lens.end());
  std::vector<TinyCase> out;
  const int variants = 3 + 2 * int(f.fp8_kv.size());
  for (int variant = 0; variant < variants; ++variant) {
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
      p.softcap = 2.0;
      what = "causal, softcap=2";
    }
    GenOptions g;
    g.seed = 7 + uint64_t(variant);
    const bool per_tensor = variant >= 3 && (variant - 3) % 2 == 0;
    if (variant >= 3) {
      p.kv_dtype = f.fp8_kv[std::size_t((variant - 3) / 2)];
      what = "causal, kv=" + std::string(dtype_name(*p.kv_dtype));
      if (per_tensor) {
        g.k_scale = {0.05f};
        g.v_scale = {4.0f};
        what += " with k_scale=0.05, v_scale=4";
      } else {
        g.k_scale = {0.05f, 2.0f};
        g.v_scale = {4.0f, 0.3f};
        what += " with per-head scales";
      }
    }
    out.push_back({what,
                   f.family == Family::prefill ? make_prefill_problem(p, {3, 17}, {3, 40}, g)
                                               : make_decode_problem(p, lens, g),
                   variant == 0,
                   p.kv_dtype ? std::string(dtype_name(*p.kv_dtype)) : std::string()});
  }
  return out;
}

// The key under which the first worker's contract notes are marked said (a worker after a crash
// does not say them again).
constexpr const char* kNotesKey = "(contract notes)";

// Runs every configuration of every family on each of its tiny cases, skipping what earlier
// workers finished (kCrashesPerFamily crashes end a family's check). First, the notes verify
// gives on the plugin contract (a decode_v2 whose can_run accepts a block size that does not
// divide its partition), from the same questions verify asks.
int check_worker(Backend& be, const WorkerLink& link) {
  RunRequest req;
  req.diagnose = true;
  req.rewritten_call = true; // tiny cases: each once more with its inputs rewritten in place
  const auto& fams = be.declaration().families;
  if (!link.finished(kNotesKey) && std::any_of(fams.begin(), fams.end(), [](const FamilyDecl& f) {
        return f.family == Family::decode_v2;
      })) {
    // can_run on small problems of each candidate size, as verify asks: a crash or an exception
    // there is the kernel set's, named by this phase, not a case's.
    link.begin_kernel_phase("asking the decode kernels which block sizes they accept",
                            kKernelPhaseSeconds);
    const KernelTargets aim = kernel_targets(be, Phase::decode, DType::f16);
    link.end();
    for (const std::string& note : aim.contract_notes) {
      link.say("  note: " + note);
    }
    link.say(kNotesKey);
  }
  for (const FamilyDecl& f : be.declaration().families) {
    const std::string fam = family_name(f.family);
    if (link.finished(fam)) {
      continue;
    }
    const std::vector<TinyCase> cases = tiny_cases(f);
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const TinyCase& c = cases[i];
      const std::string case_key = fam + " #" + std::to_string(i);
      const std::vector<KernelConfig> configs = be.config_space(f.family, c.problem.params);
      CheckSubject subject(fam + " " + c.what, c.problem, {}, /*reference_threads=*/1);
      for (const KernelConfig& k : configs) {
        RunIdentity run{case_key + " " + k.key(), k,
                        json{{"family", fam},
                             {"case", case_key},
                             {"what", c.what},
                             {"plain", c.plain},
                             {"fp8", c.fp8},
                             {"problem", c.problem.describe()},
                             {"configs", configs.size()},
                             {"config", k.key()}}};
        if (link.finished(run.key)) {
          continue;
        }
        link.result(run, checked_run(link, be, subject, run, req));
      }
    }
  }
  return 0;
}

// The supervisor's view of one case: its configurations' results as they arrive.
struct CaseTally {
  int seen = 0;
  int passed = 0;
  int failed = 0;
  std::string refusals;
  std::string worst; // the passing run's summary with the largest error
  double worst_err = -1.0;
};

// The line a failing, erroneous or crashing configuration prints.
std::string failure_line(const json& ctx, const CheckedRunResult& r) {
  const std::string what = ctx.value("what", "");
  const std::string config = ctx.value("config", "");
  if (r.status == RunStatus::fault) {
    return "FAIL: the plugin crashed or hung its worker with " + config + " (" + what +
           "): " + r.reason;
  }
  if (r.status == RunStatus::error || !r.check) {
    return "FAIL (" + what + ") with " + config + ": " + r.reason;
  }
  std::string line = "FAIL: wrong results (" + what + ") with " + config + ": " +
                     r.check->report.summary();
  if (!r.check->spread.empty()) {
    line += "; " + r.check->spread;
  }
  for (std::size_t i = 0; i < r.causes.size(); ++i) {
    line += (i == 0 ? "; looks like: " : "; ") + r.causes[i];
  }
  return line;
}

// The line a case prints once all its configurations are in.
std::string case_line(const json& ctx, const CaseTally& t, bool& failed) {
  const std::string what = ctx.value("what", "");
  const int n = ctx.value("configs", 0);
  if (t.failed > 0) {
    failed = true;
    return "FAIL (" + what + "): " + std::to_string(t.failed) + " of " + std::to_string(n) +
           " configurations failed";
  }
  if (t.passed == 0) {
    // Plain causal attention is the least a family must run; the masks may be refused.
    const bool plain = ctx.value("plain", false);
    failed = plain;
    return std::string(plain ? "FAIL" : "skipped") + " (" + what + "): no configuration accepts " +
           ctx.value("problem", "") + t.refusals;
  }
  std::string line = "ok (" + what + "): " + std::to_string(t.passed) + " of " +
                     std::to_string(n) + " configurations passed";
  if (n - t.passed > 0) {
    line += ", " + std::to_string(n - t.passed) + " refused";
  }
  return line + "; the worst " + t.worst;
}

} // namespace

PluginCheckResult check_plugin(const PluginLibrary& lib, const std::string& spec,
                               const BackendOptions& bo, bool in_process,
                               const std::function<void(const std::string&)>& print) {
  std::set<std::string> failed_families;
  CheckedSession session;
  session.work = [&](const WorkerLink& link, int) {
    auto be = link.start_kernels([&] { return make_backend(spec, bo); });
    return check_worker(*be, link);
  };
  session.on_say = [&](const std::string& text) {
    if (text == kNotesKey) {
      session.finished.insert(kNotesKey); // said once, whatever worker comes next
    } else {
      print(text);
    }
  };
  session.on_replaced = print;              // a worker replaced after a death outside a case
  std::map<std::string, CaseTally> tallies; // by case key
  std::map<std::string, int> crashes;       // by family
  // By family and declared fp8 format: its tiny cases every configuration refused, and whether
  // some configuration ran one.
  std::map<std::pair<std::string, std::string>, std::pair<int, bool>> fp8_use;
  session.on_result = [&](const RunIdentity& run, const CheckedRunResult& r) {
    const json& ctx = run.context;
    const std::string fam = ctx.value("family", "?");
    CaseTally& t = tallies[ctx.value("case", "")];
    ++t.seen;
    switch (r.status) {
    case RunStatus::passed: {
      ++t.passed;
      const double err = r.check ? r.check->report.norm_rel_err : 0.0;
      if (err > t.worst_err) {
        t.worst_err = err;
        t.worst = ctx.value("config", "") + ": " +
                  (r.check ? r.check->report.summary() : std::string());
        if (r.check && !r.check->lse_checked) {
          t.worst += " (the family does not write lse)";
        }
      }
      break;
    }
    case RunStatus::skipped:
      t.refusals += "\n      " + ctx.value("config", "") + ": " + r.reason;
      break;
    default:
      ++t.failed;
      failed_families.insert(fam);
      print("  " + fam + ": " + failure_line(ctx, r));
      break;
    }
    if (r.status == RunStatus::fault && ++crashes[fam] == kCrashesPerFamily) {
      // Each crash costs a new worker: past a few, the family's other runs say no more.
      session.finished.insert(fam);
      print("  " + fam +
            ": its other configurations and cases not run: it crashed or hung its worker " +
            std::to_string(kCrashesPerFamily) + " times");
      return;
    }
    if (t.seen == ctx.value("configs", 0)) {
      if (const std::string fp8 = ctx.value("fp8", ""); !fp8.empty()) {
        auto& [refused, ran] = fp8_use[{fam, fp8}];
        if (t.passed + t.failed == 0) {
          ++refused;
        } else {
          ran = true;
        }
      }
      bool failed = false;
      print("  " + fam + ": " + case_line(ctx, t, failed));
      if (failed) {
        failed_families.insert(fam);
      }
    }
  };
  const SupervisedRun run = session.run(in_process);
  for (const auto& [which, use] : fp8_use) {
    if (!use.second && use.first > 0) {
      // The tiny cases' block and head sizes are not aimed at what the family accepts (verify's
      // are): a note here, a failure in verify if no case of the format runs there either.
      print("  " + which.first + ": note: it declares " + which.second +
            " KV caches, yet every configuration refused its tiny " + which.second +
            " cases; verify fails it if it refuses every " + which.second +
            " case at the sizes it accepts");
    }
  }
  return {int(lib.families().size()), int(failed_families.size()), run.teardown_failure};
}

} // namespace attn
