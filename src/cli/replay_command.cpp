// `attn-tune replay FILE`: re-runs an engine's dumped attention call with the reference (and
// optionally a backend or a plugin, through the checked run) and judges the engine's answer
// (validation/replay_judge), so a wrong result becomes a test case.
#include <cstdio>
#include <memory>
#include <string>

#include "src/cli/commands.h"
#include "src/cli/kernels_option.h"
#include "src/cli/output_option.h"
#include "src/validation/replay_judge.h"

namespace attn::cli {

namespace {

struct ReplayOptions {
  ReplayJudgeOptions judge;
  std::string kernels; // a kernel plugin library; empty: the built-in kernels
};

int run_replay(const ReplayOptions& o) {
  const std::shared_ptr<const PluginLibrary> plugin = open_kernels(o.kernels);
  return judge_replay(o.judge, plugin.get(), o.kernels, [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  });
}

} // namespace

Command setup_replay(CLI::App& root) {
  auto opt = std::make_shared<ReplayOptions>();
  CLI::App* sub = root.add_subcommand(
      "replay", "Re-run an engine's dumped attention call (safetensors) and judge its answer");
  sub->add_option("file", opt->judge.file,
                  "Replay file (.safetensors), see SPEC.md \"Replay files\"")
      ->required();
  sub->add_option("--backend", opt->judge.backend,
                  "Also compute with this backend: reference (default), cpu or cuda:N");
  sub->add_option("--config", opt->judge.config,
                  "Kernel configuration as JSON, e.g. '{\"family\":\"decode_v2\",\"params\":"
                  "{\"partition\":512}}' (default: decode_v1 or prefill, default parameters)");
  sub->add_option("--save", opt->judge.save,
                  "Write the computed out (input dtype, nearest even) and lse (fp32) here")
      ->check(output_file());
  sub->add_option("--threads", opt->judge.threads, "Reference and CPU backend threads (0: all)")
      ->check(CLI::Range(0, 4096));
  sub->add_flag("--in-process", opt->judge.in_process,
                "Run the kernels in this process, without a supervised worker (for debuggers; a "
                "crash ends the replay)");
  add_kernels_option(sub, opt->kernels);
  return {sub, [opt] { return run_replay(*opt); }};
}

} // namespace attn::cli
