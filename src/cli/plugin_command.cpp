// `attn-tune plugin check PATH.so`: loads a kernel plugin, prints what it declares, and runs one
// tiny case per family against the reference, saying in plain words what is wrong. The cases
// run in a supervised worker, so a plugin that crashes is reported, not fatal.
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "src/backends/deadline.h"
#include "src/backends/plugin/plugin_backend.h"
#include "src/cli/commands.h"
#include "src/cli/kernels_option.h"
#include "src/io/supervisor.h"
#include "src/model/errors.h"
#include "src/model/problem_gen.h"
#include "src/validation/check.h"

namespace attn::cli {

namespace {

struct PluginCheckOptions {
  std::string path;
  std::string device;
  int threads = 0;
  bool in_process = false;
};

void print_declarations(const PluginLibrary& lib) {
  const PluginIdentity& id = lib.identity();
  std::printf("plugin %s, version %s, plugin ABI %u, %s\n", id.name.c_str(),
              id.version.empty() ? "(none given)" : id.version.c_str(), id.abi_version,
              id.device_kind == ATTN_DEVICE_CUDA ? "CUDA device memory" : "host memory");
  if (!id.python_module.empty()) {
    std::printf("Python module %s (%s), sources sha256 %s\n", id.python_module.c_str(),
                id.python_file.c_str(), id.library_sha256.c_str());
  } else {
    std::printf("library %s, sha256 %s\n", id.path.c_str(), id.library_sha256.c_str());
  }
  for (const PluginFamily& f : lib.families()) {
    std::printf("  %-9s  layout %-4s  %s  %zu configurations\n", family_name(f.family),
                kv_layout_name(f.layout), f.writes_lse ? "writes lse" : "no lse    ",
                lib.config_space(f.family).size());
    for (const auto& [name, values] : f.params) {
      std::string vs;
      for (int v : values) {
        vs += (vs.empty() ? "" : ", ") + std::to_string(v);
      }
      std::printf("             %s: %s\n", name.c_str(), vs.c_str());
    }
  }
}

// The tiny cases of a family: GQA, ragged lengths across block and partition edges, fp16, and
// for prefill a chunked sequence (fewer queries than keys); first causal only, then with a
// sliding window, then with a soft cap, so a failure says which part of the mask is wrong.
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

// Checks every family of the plugin not in `done`, announcing each as a unit.
int check_families(Backend& be, const PluginLibrary& lib, const std::set<std::string>& done,
                   const Emit& emit) {
  for (const PluginFamily& f : lib.families()) {
    const std::string fam = family_name(f.family);
    if (done.count(fam)) {
      continue;
    }
    const std::vector<TinyCase> cases = tiny_cases(f.family);
    auto say = [&](const std::string& text) {
      emit({{"ev", "say"}, {"text", "  " + fam + ": " + text}});
    };
    double deadline = 0.0;
    for (const TinyCase& c : cases) {
      deadline += unit_deadline_s(c.problem, be.info(), nullptr);
    }
    emit(begin_message(fam, deadline, {{"family", fam}}));
    bool failed = false;
    for (const TinyCase& c : cases) {
      const Problem& pr = c.problem;
      // The first configuration the plugin accepts for the case; every refusal is shown.
      std::optional<KernelConfig> cfg;
      std::string refusals;
      for (const KernelConfig& k : be.config_space(f.family, pr.params)) {
        if (auto why = be.can_run(k, pr)) {
          refusals += "\n      " + k.key() + ": " + *why;
        } else {
          cfg = k;
          break;
        }
      }
      if (!cfg) {
        // Plain causal attention is the least a family must run; the masks may be refused.
        const bool plain = &c == &cases.front();
        say(std::string(plain ? "FAIL" : "skipped") + " (" + c.what +
            "): no configuration accepts " + pr.describe() + refusals);
        failed = failed || plain;
        continue;
      }
      try {
        const RunOutput r = run_once(be, pr, *cfg);
        const ReferenceResult ref = reference_attention(pr, {.threads = 1, .rows = {}});
        const CheckReport rep =
            check_output(r.out, r.checked_lse(), ref, tolerance_for(pr.params.dtype));
        say(std::string(rep.pass ? "ok" : "FAIL: wrong results") + " (" + c.what + ") with " +
            cfg->key() + ": " + rep.summary() +
            (r.lse_written ? "" : " (lse not checked: the family does not write it)"));
        failed = failed || !rep.pass;
      } catch (const DeviceFault&) {
        throw;
      } catch (const std::exception& e) {
        say("FAIL (" + c.what + ") with " + cfg->key() + ": " + e.what());
        failed = true;
      }
    }
    if (failed) {
      emit({{"ev", "fail"}});
    }
    emit(end_message());
    emit({{"ev", "done"}, {"family", fam}});
  }
  return 0;
}

int run_plugin_check(const PluginCheckOptions& o) {
  const std::shared_ptr<const PluginLibrary> lib = open_kernels(o.path);
  print_declarations(*lib);
  const BackendOptions bo{.threads = o.threads, .kernels = o.path};
  const DeviceChoice choice = choose_device(o.device, lib.get(), bo);
  std::printf("tiny cases (%s):\n", choice.spec.c_str());
  std::fflush(stdout);
  std::set<std::string> done;
  int failures = 0;
  SupervisorHooks hooks;
  hooks.work = [&](const Emit& emit, int) {
    auto be = make_backend(choice.spec, bo);
    return check_families(*be, *lib, done, emit);
  };
  hooks.on_message = [&](const nlohmann::json& m) {
    const std::string ev = m.value("ev", "");
    if (ev == "say") {
      std::printf("%s\n", m.value("text", "").c_str());
      std::fflush(stdout);
    } else if (ev == "fail") {
      ++failures;
    } else if (ev == "done") {
      done.insert(m.value("family", ""));
    }
  };
  hooks.on_fault = [&](const nlohmann::json& info, const std::string& reason) {
    const std::string fam = info.value("family", "?");
    std::printf("  %s: FAIL: the plugin crashed the process: %s\n", fam.c_str(), reason.c_str());
    std::fflush(stdout);
    done.insert(fam);
    ++failures;
  };
  const SupervisedRun run = supervise(hooks, o.in_process);
  if (run.exit_code != 0) {
    return run.exit_code;
  }
  std::printf("%s\n", failures == 0 ? "plugin check: every family passed its tiny case"
                                    : ("plugin check: " + std::to_string(failures) + " of " +
                                       std::to_string(lib->families().size()) + " families failed")
                                          .c_str());
  return failures == 0 ? kExitOk : kExitMismatch;
}

} // namespace

Command setup_plugin(CLI::App& root) {
  auto opt = std::make_shared<PluginCheckOptions>();
  CLI::App* sub = root.add_subcommand("plugin", "Inspect a kernel plugin library");
  sub->require_subcommand(1);
  CLI::App* check = sub->add_subcommand(
      "check", "Load a plugin, print what it declares, and run one tiny case per family");
  check
      ->add_option("library", opt->path,
                   "The plugin's shared library (PATH.so), or python:MODULE[:FACTORY] "
                   "(docs/python-kernels.md)")
      ->required();
  check->add_option("--device", opt->device,
                    "cpu for host-memory plugins, cuda:N for CUDA ones (default: by its kind)");
  check->add_option("--threads", opt->threads, "Threads for host-memory plugins (0: all)")
      ->check(CLI::Range(0, 4096));
  check->add_flag("--in-process", opt->in_process,
                  "Run the cases in this process (for debuggers; a crash ends the check)");
  return {sub, [opt] { return run_plugin_check(*opt); }};
}

} // namespace attn::cli
