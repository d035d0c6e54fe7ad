// `attn-tune replay FILE`: re-runs an engine's dumped attention call with the reference (and
// optionally a backend) and judges the engine's answer, so a wrong result becomes a test case.
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>

#include "reference/reference.h"
#include "src/backends/backend.h"
#include "src/backends/registry.h"
#include "src/cli/commands.h"
#include "src/cli/kernels_option.h"
#include "src/model/errors.h"
#include "src/validation/check.h"
#include "src/validation/replay.h"

namespace attn::cli {

namespace {

struct ReplayOptions {
  std::string file;
  std::string backend = "reference";
  std::string config; // JSON KernelConfig; empty: the phase's family with default parameters
  std::string save;
  int threads = 0;
  std::string kernels; // a kernel plugin library; empty: the built-in kernels
};

KernelConfig pick_config(const ReplayOptions& o, const Problem& pr) {
  KernelConfig cfg;
  cfg.family = pr.phase == Phase::decode ? Family::decode_v1 : Family::prefill;
  if (o.config.empty()) {
    return cfg;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(o.config);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError("--config is not valid JSON (error at byte " + std::to_string(e.byte) + ")");
  }
  cfg = KernelConfig::from_json(j);
  if (family_is_decode(cfg.family) != (pr.phase == Phase::decode)) {
    throw InputError(std::string("--config family ") + family_name(cfg.family) + " cannot run a " +
                     phase_name(pr.phase) + " problem");
  }
  return cfg;
}

// What the reference computed, for files that carry no answer to judge.
void print_reference_summary(const ReferenceResult& ref) {
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
  std::printf("reference: out rms=%.6g max_abs=%.6g; lse in [%.6g, %.6g]; %lld (row, head) pairs "
              "see no key (out 0, lse -inf)\n",
              std::sqrt(sum2 / n), max_abs, empty == int64_t(ref.lse.size()) ? 0.0 : lo,
              empty == int64_t(ref.lse.size()) ? 0.0 : hi, (long long)empty);
}

void print_check(const char* what, const CheckReport& rep, const Tolerance& tol) {
  std::printf("%s: %s %s (tolerance atol=%g rtol=%g norm_rel=%g lse_atol=%g)\n", what,
              rep.pass ? "MATCH" : "MISMATCH", rep.summary().c_str(), tol.atol, tol.rtol,
              tol.norm_rel, tol.lse_atol);
  std::fputs(rep.details().c_str(), stdout);
}

int run_replay(const ReplayOptions& o) {
  const std::shared_ptr<const PluginLibrary> plugin = open_kernels(o.kernels);
  if (!o.config.empty() && o.backend == "reference" && !plugin) {
    throw InputError("--config chooses a backend kernel; it needs --backend cpu or cuda:N");
  }
  const ReplayFile rf = load_replay(o.file);
  const Problem& pr = rf.problem;
  std::printf("replay %s: %s%s%s\n", o.file.c_str(), pr.describe().c_str(),
              rf.out ? " (file holds out" : " (file holds no out", rf.lse ? " and lse)" : ")");

  // The backend and its configuration first: a refusal should not wait for the reference.
  std::unique_ptr<Backend> be;
  std::vector<KernelConfig> cfgs;
  if (plugin) {
    // Through a plugin: the configuration asked for, else every one it declares for the phase.
    const std::string spec =
        o.backend == "reference"
            ? choose_device("", plugin.get(), {.threads = 0, .kernels = ""}).spec
            : o.backend;
    be = make_backend(spec, {.threads = o.threads, .kernels = o.kernels});
    if (!o.config.empty()) {
      cfgs.push_back(pick_config(o, pr));
    } else {
      for (Family f : {Family::decode_v1, Family::decode_v2, Family::prefill}) {
        if (family_is_decode(f) == (pr.phase == Phase::decode)) {
          for (const KernelConfig& c : be->config_space(f, pr.params)) {
            cfgs.push_back(c);
          }
        }
      }
      if (cfgs.empty()) {
        throw InputError("plugin " + plugin->identity().name + " implements no family for " +
                         phase_name(pr.phase) + " problems");
      }
    }
    std::vector<KernelConfig> runnable;
    for (const KernelConfig& c : cfgs) {
      if (auto why = be->can_run(c, pr)) {
        std::printf("%s: skipped: %s\n", c.key().c_str(), why->c_str());
      } else {
        runnable.push_back(c);
      }
    }
    if (runnable.empty()) {
      throw InputError("no configuration of plugin " + plugin->identity().name +
                       " can run this problem (reasons above)");
    }
    cfgs = std::move(runnable);
  } else if (o.backend != "reference") {
    be = make_backend(o.backend, {.threads = o.threads, .kernels = ""});
    cfgs.push_back(pick_config(o, pr));
    if (auto why = be->can_run(cfgs[0], pr)) {
      throw InputError(cfgs[0].key() + " cannot run this problem on " + be->info().id + ": " +
                       *why);
    }
  }

  const ReferenceResult ref = reference_attention(pr, {.threads = o.threads, .rows = {}});
  const Tolerance tol = tolerance_for(pr.params.dtype);
  bool pass = true;

  HostTensor saved_out;
  std::vector<float> saved_lse;
  for (const KernelConfig& cfg : cfgs) {
    RunOutput r = run_once(*be, pr, cfg);
    const std::size_t lse_size = std::size_t(ref.rows) * std::size_t(ref.heads);
    if (r.lse.size() != lse_size) {
      throw std::runtime_error("backend " + be->info().id + " returned " +
                               std::to_string(r.lse.size()) + " lse values, expected " +
                               std::to_string(lse_size));
    }
    const CheckReport rep = check_output(r.out, r.checked_lse(), ref, tol);
    const std::string what = be->info().id + " " + cfg.key() +
                             (plugin ? " (plugin " + plugin->identity().name + ")" : "") +
                             " vs reference";
    print_check(what.c_str(), rep, tol);
    pass = pass && rep.pass;
    if (saved_out.data.empty()) { // --save keeps the first configuration's answer
      saved_out = std::move(r.out);
      saved_lse = std::move(r.lse);
    }
  }
  if (!be) {
    if (!rf.out) {
      print_reference_summary(ref);
    }
    if (!o.save.empty()) {
      saved_out = reference_out_as(ref, pr.params.dtype);
      saved_lse = reference_lse_as_float(ref);
    }
  }

  if (rf.out) {
    const CheckReport rep = check_output(*rf.out, rf.lse ? &*rf.lse : nullptr, ref, tol);
    print_check("file out vs reference", rep, tol);
    pass = pass && rep.pass;
  }

  if (!o.save.empty()) {
    save_outputs(o.save, saved_out, saved_lse);
    std::printf("saved out (%s) and lse (fp32) to %s\n",
                std::string(dtype_name(saved_out.dtype)).c_str(), o.save.c_str());
  }
  return pass ? kExitOk : kExitMismatch;
}

} // namespace

Command setup_replay(CLI::App& root) {
  auto opt = std::make_shared<ReplayOptions>();
  CLI::App* sub = root.add_subcommand(
      "replay", "Re-run an engine's dumped attention call (safetensors) and judge its answer");
  sub->add_option("file", opt->file, "Replay file (.safetensors), see SPEC.md \"Replay files\"")
      ->required();
  sub->add_option("--backend", opt->backend,
                  "Also compute with this backend: reference (default), cpu or cuda:N");
  sub->add_option("--config", opt->config,
                  "Kernel configuration as JSON, e.g. '{\"family\":\"decode_v2\",\"params\":"
                  "{\"partition\":512}}' (default: decode_v1 or prefill, default parameters)");
  sub->add_option("--save", opt->save,
                  "Write the computed out (input dtype, nearest even) and lse (fp32) here");
  sub->add_option("--threads", opt->threads, "Reference and CPU backend threads (0: all)")
      ->check(CLI::Range(0, 4096));
  add_kernels_option(sub, opt->kernels);
  return {sub, [opt] { return run_replay(*opt); }};
}

} // namespace attn::cli
