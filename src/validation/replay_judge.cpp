#include "src/validation/replay_judge.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "build_info.h"
#include "src/backends/cpu/isa.h"
#include "src/backends/registry.h"
#include "src/io/json_unique.h"
#include "src/model/errors.h"
#include "src/validation/checked_run.h"
#include "src/validation/replay.h"

namespace attn {

using nlohmann::json;

namespace {

KernelConfig pick_config(const ReplayJudgeOptions& o, const Problem& pr) {
  KernelConfig cfg;
  cfg.family = pr.phase == Phase::decode ? Family::decode_v1 : Family::prefill;
  if (o.config.empty()) {
    return cfg;
  }
  json j;
  try {
    j = parse_json_unique_keys(o.config);
  } catch (const DuplicateKey& e) {
    throw InputError(std::string("--config: ") + e.what());
  } catch (const json::exception& e) {
    throw InputError("--config is not valid JSON (" + json_error_words(e) + ")");
  }
  cfg = KernelConfig::from_json(j);
  if (family_is_decode(cfg.family) != (pr.phase == Phase::decode)) {
    throw InputError(std::string("--config family ") + family_name(cfg.family) + " cannot run a " +
                     phase_name(pr.phase) + " problem");
  }
  return cfg;
}

// What the reference computed, for files that carry no answer to judge.
std::string reference_summary(const ReferenceResult& ref) {
  double sum2 = 0.0;
  double max_abs = 0.0;
  for (double x : ref.out) {
    sum2 += x * x;
    max_abs = std::max(max_abs, std::abs(x));
  }
  int64_t empty = 0;
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (double l : ref.lse) {
    if (std::isinf(l)) {
      ++empty;
    } else {
      lo = std::min(lo, l);
      hi = std::max(hi, l);
    }
  }
  const double n = double(std::max<std::size_t>(1, ref.out.size()));
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "reference: out rms=%.6g max_abs=%.6g; lse in [%.6g, %.6g]; %lld (row, head) pairs "
                "see no key (out 0, lse -inf)",
                std::sqrt(sum2 / n), max_abs, empty == int64_t(ref.lse.size()) ? 0.0 : lo,
                empty == int64_t(ref.lse.size()) ? 0.0 : hi, (long long)empty);
  return buf;
}

std::string check_lines(const std::string& what, const CheckReport& rep, const Tolerance& tol) {
  char buf[600];
  std::snprintf(buf, sizeof buf,
                "%s: %s %s (tolerance atol=%g x the size of the values averaged, rtol=%g "
                "norm_rel=%g lse_atol=%g + 2^-21 |lse|)",
                what.c_str(), rep.pass ? "MATCH" : "MISMATCH", rep.summary().c_str(), tol.atol,
                tol.rtol, tol.norm_rel, tol.lse_atol);
  std::string out = buf;
  std::string details = rep.details();
  if (!details.empty() && details.back() == '\n') {
    details.pop_back();
  }
  if (!details.empty()) {
    out += "\n" + details;
  }
  if (!rep.pass && rep.bad == 0 && rep.lse_bad == 0 && rep.unwritten == 0 && rep.nonfinite == 0 &&
      rep.norm_rel_err > rep.norm_bound) {
    // No single element is out of bounds: the whole output is, by its normwise error.
    char why[200];
    std::snprintf(why, sizeof why,
                  "  every element is within atol + rtol |ref|, but the normwise error %.3e "
                  "exceeds its bound %g: small errors everywhere (a precision loss)",
                  rep.norm_rel_err, rep.norm_bound);
    out += std::string("\n") + why;
  }
  return out;
}

// A call whose exact output rounds past the output dtype's range has no answer to judge: every
// kernel, however right, writes an infinity there (values or a v_scale too large for fp16, say).
// Refused as input, as a NaN in a read slot is.
void refuse_unstorable_output(const ReferenceResult& ref, const Problem& pr,
                              const std::string& file) {
  const HostTensor rounded = reference_out_as(ref, pr.params.dtype);
  for (std::size_t i = 0; i < ref.out.size(); ++i) {
    if (std::isfinite(ref.out[i]) && std::isinf(rounded.get(i))) {
      const std::size_t per_row = std::size_t(ref.heads) * std::size_t(ref.head_dim);
      const std::string dt(dtype_name(pr.params.dtype));
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    ": the call's exact output is %.6g at out[row=%zu, head=%zu, dim=%zu], past "
                    "%s's range: no answer in %s can match it (values or scales too large for "
                    "the output dtype)",
                    ref.out[i], i / per_row, i % per_row / std::size_t(ref.head_dim),
                    i % std::size_t(ref.head_dim), dt.c_str(), dt.c_str());
      throw InputError(file + buf);
    }
  }
  // lse is fp32 whatever the output dtype (a k_scale or queries large enough put it past 3.4e38).
  for (std::size_t i = 0; i < ref.lse.size(); ++i) {
    if (std::isfinite(ref.lse[i]) && std::isinf(float(ref.lse[i]))) {
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    ": the call's exact lse is %.6g at lse[row=%zu, head=%zu], past fp32's range "
                    "(lse is fp32): no kernel computes this call in fp32 (scores too large: "
                    "queries or k_scale)",
                    ref.lse[i], i / std::size_t(ref.heads), i % std::size_t(ref.heads));
      throw InputError(file + buf);
    }
  }
}

// The worker: the configurations to run, each a checked run, then the file's own answer, the
// reference's figures for a file without one, and --save.
int replay_worker(const ReplayJudgeOptions& o, const PluginLibrary* plugin,
                  const std::string& kernels, const ReplayFile& rf,
                  const std::vector<KernelConfig>& asked, const WorkerLink& link) {
  const Problem& pr = rf.problem;
  CheckSubject subject(o.file, pr, {}, o.threads);
  refuse_unstorable_output(subject.reference(link), pr, o.file);
  std::unique_ptr<Backend> be;
  std::vector<KernelConfig> cfgs = asked;
  if (plugin != nullptr || o.backend != "reference") {
    // A plugin without --backend runs on its kind of device.
    const std::string spec = plugin != nullptr && o.backend == "reference"
                                 ? choose_device("", plugin, {.threads = 0, .kernels = ""}).spec
                                 : o.backend;
    be = link.start_kernels(
        [&] { return make_backend(spec, {.threads = o.threads, .kernels = kernels}); });
    if (asked.empty()) { // a plugin's every configuration for the phase
      for (Family f : {Family::decode_v1, Family::decode_v2, Family::prefill}) {
        if (family_is_decode(f) == (pr.phase == Phase::decode)) {
          for (const KernelConfig& c : be->config_space(f, pr.params)) {
            cfgs.push_back(c);
          }
        }
      }
      if (cfgs.empty()) {
        throw InputError("plugin " + be->declaration().name + " implements no family for " +
                         phase_name(pr.phase) + " problems");
      }
    }
  }
  const std::string who =
      plugin != nullptr ? " (plugin " + plugin->identity().name + ")" : std::string();
  int ran = 0;
  bool saved = false;
  RunOutput first;
  std::string first_name; // who computed `first`
  for (const KernelConfig& cfg : cfgs) {
    const std::string name = be->info().id + " " + cfg.key() + who;
    const RunIdentity run{cfg.key(), cfg, json{{"who", name}, {"what", name + " vs reference"}}};
    if (link.finished(run.key)) {
      ++ran;
      continue;
    }
    RunOutput out;
    // As verify: once more with the inputs rewritten in place, which is how a kernel that keeps
    // state between calls shows in one problem (a verify dump of such a failure holds the
    // rewritten inputs; rewriting them back is the same call). Not with --save, which keeps an
    // answer to the file's own inputs.
    RunRequest req;
    req.rewritten_call = o.save.empty();
    const CheckedRunResult r = checked_run(link, *be, subject, run, req, &out);
    if (r.status == RunStatus::skipped && plugin == nullptr) {
      throw InputError(cfg.key() + " cannot run this problem on " + be->info().id + ": " +
                       r.reason);
    }
    if (r.status != RunStatus::skipped) {
      ++ran;
      if (!saved && r.status != RunStatus::error) {
        first = std::move(out); // --save keeps the first configuration's answer
        first_name = name;
        saved = true;
      }
    }
    link.result(run, r);
  }
  if (be && ran == 0) {
    throw InputError("no configuration of plugin " + be->declaration().name +
                     " can run this problem (reasons above)");
  }
  if (!be && !rf.out) {
    link.say(reference_summary(subject.reference(link)));
  }
  if (rf.out && !link.finished("file")) {
    CheckedRunResult r;
    r.check = subject.check_answer(link, *rf.out, rf.lse ? &*rf.lse : nullptr);
    r.status = r.check->report.pass ? RunStatus::passed : RunStatus::failed;
    link.result(RunIdentity{"file", std::nullopt, {{"what", "file out vs reference"}}}, r);
  }
  if (!o.save.empty()) {
    if (!be) {
      const ReferenceResult& ref = subject.reference(link);
      first.out = reference_out_as(ref, pr.params.dtype);
      first.lse = reference_lse_as_float(ref);
      first_name = "reference (in double; out rounded once to " +
                   std::string(dtype_name(pr.params.dtype)) + ", lse to fp32)";
      saved = true;
    }
    if (saved) {
      // Whose answer the file holds, so that a saved file compared later says what it was.
      save_outputs(o.save, first.out, first.lse,
                   {{"attn_tune_computed_by", first_name},
                    {"attn_tune_replay_of", o.file},
                    {"attn_tune_version", ATTN_VERSION " (" ATTN_GIT_HASH ")"}});
      link.say("saved out (" + std::string(dtype_name(first.out.dtype)) + ") and lse (fp32) to " +
               o.save);
    }
  }
  return 0;
}

} // namespace

int judge_replay(const ReplayJudgeOptions& o, const PluginLibrary* plugin,
                 const std::string& kernels, const std::function<void(const std::string&)>& print) {
  if (!o.config.empty() && o.backend == "reference" && plugin == nullptr) {
    throw InputError("--config chooses a backend kernel; it needs --backend cpu or cuda:N");
  }
  if (!o.save.empty()) {
    std::error_code ec;
    if (std::filesystem::equivalent(o.save, o.file, ec) && !ec) {
      throw InputError("--save " + o.save +
                       " is the file replayed: saving there would replace "
                       "the engine's dump with the computed answer; name another file");
    }
  }
  const ReplayFile rf = load_replay(o.file);
  const Problem& pr = rf.problem;
  refuse_past_memory(pr, o.threads, o.file);
  if (plugin == nullptr && (o.backend == "cpu" || o.backend.starts_with("cpu:"))) {
    // The CPU kernels' forcing variables, refused before the file's first line rather than by
    // the worker after it: a usage error is one line.
    (void)cpu::selected_isa();
    (void)cpu::selected_fp8_reads();
  }
  print("replay " + o.file + ": " + pr.describe() +
        (rf.out ? (rf.lse ? " (file holds out and lse)" : " (file holds out)")
                : (rf.lse ? " (file holds lse but no out)" : " (file holds no answer)")));
  if (pr.params.fp8_cache()) {
    // The scales the answer is judged with: a dump that lost them (1 where absent, SPEC.md)
    // otherwise reads as a wrong kernel.
    print("  fp8 scales: " + fp8_scale_words(pr));
  }
  if (rf.lse && !rf.out) {
    std::fprintf(stderr,
                 "replay: warning: %s holds lse but no out: an answer is judged by its out (and "
                 "its lse beside it), so this lse is not judged\n",
                 o.file.c_str());
  }
  // Names from the file, joined for a warning that stays one line.
  const auto listed = [](const std::vector<std::string>& from) {
    std::string names;
    for (std::string n : from) {
      for (char& c : n) {
        c = static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c;
      }
      names += (names.empty() ? "" : ", ") + n;
    }
    return names;
  };
  if (!rf.unread.empty()) {
    // A misnamed answer would otherwise be judged as no answer at all.
    std::fprintf(stderr,
                 "replay: warning: %s holds tensors attn-tune does not read: %s (the answer is "
                 "`out`, its lse `lse`, the fp8 scales `k_scale` and `v_scale`)\n",
                 o.file.c_str(), listed(rf.unread).c_str());
  }
  if (!rf.misnamed.empty()) {
    // A window or cap under another library's name would otherwise judge the call without it.
    std::fprintf(stderr,
                 "replay: warning: %s has __metadata__ keys attn-tune does not read: %s; the "
                 "call is judged with those parameters' defaults (SPEC.md \"Replay files\")\n",
                 o.file.c_str(), listed(rf.misnamed).c_str());
  }
  for (const char* scale : {"k_scale", "v_scale"}) {
    // A scale written as metadata rather than as its tensor would judge the call with 1.
    const std::string name = scale;
    if (rf.problem.params.fp8_cache() && rf.metadata.count(name) != 0 &&
        (name == "k_scale" ? rf.problem.k_scale : rf.problem.v_scale).empty()) {
      std::fprintf(stderr,
                   "replay: warning: %s has __metadata__ %s, which is not read: a scale is an F32 "
                   "tensor of that name (shape [] or [num_kv_heads]); judged with %s 1\n",
                   o.file.c_str(), scale, scale);
    }
  }
  // The configuration asked for is checked here, before any worker: a typo is exit 2 at once.
  // A plugin without --config runs every configuration it declares for the phase.
  std::vector<KernelConfig> asked;
  if ((plugin != nullptr && !o.config.empty()) || (plugin == nullptr && o.backend != "reference")) {
    asked.push_back(pick_config(o, pr));
  }
  const Tolerance tol = tolerance_for(pr.params.dtype);
  bool pass = true;
  bool error = false;
  CheckedSession session;
  session.work = [&](const WorkerLink& link, int) {
    return replay_worker(o, plugin, kernels, rf, asked, link);
  };
  session.on_say = print;
  session.on_replaced = print; // a worker replaced after a death outside a run
  session.on_result = [&](const RunIdentity& run, const CheckedRunResult& r) {
    const std::string what = run.context.value("what", "");
    const std::string cfg = run.config ? run.config->key() : what;
    switch (r.status) {
    case RunStatus::skipped:
      print(cfg + ": skipped: " + r.reason);
      return;
    case RunStatus::error:
      print(run.context.value("who", cfg) + ": ERROR: " + r.reason);
      // A kernel's run that ended in its own error (a plugin's nonzero return, a Python
      // exception) fails the replay, as in verify (exit 1); anything else is attn-tune's (4).
      if (run.config) {
        pass = false;
      } else {
        error = true;
      }
      return;
    case RunStatus::fault:
      print(run.context.value("who", cfg) + ": FAULT: " + r.reason);
      pass = false;
      return;
    case RunStatus::passed:
    case RunStatus::failed:
      print(check_lines(what, r.check->report, tol));
      for (const std::string& cause : r.causes) { // a second call's failure says so
        print("  looks like: " + cause);
      }
      pass = pass && r.status == RunStatus::passed;
      return;
    }
  };
  const SupervisedRun run = session.run(o.in_process);
  if (!run.teardown_failure.empty()) {
    print("FAULT: after the replay, " + run.teardown_failure);
    pass = false;
  }
  if (error) {
    return kExitInternal;
  }
  return pass ? kExitOk : kExitMismatch;
}

} // namespace attn
