// `attn-tune replay`'s judging: an engine's dumped call run again through the checked run on a
// kernel set (the built-in kernels on a device, or a plugin's configurations), and the engine's
// own answer held against the same reference. Kernels run in a supervised worker, so a kernel
// that crashes or hangs is a fault of its configuration, never a crash of attn-tune.
#pragma once
#include <functional>
#include <string>

#include "src/backends/plugin/plugin_library.h"

namespace attn {

struct ReplayJudgeOptions {
  std::string file;
  std::string backend = "reference"; // "reference" (no kernel), "cpu" or "cuda:N"
  std::string config;                // JSON KernelConfig; empty: the phase's family by default
  std::string save;                  // write the computed out and lse here
  int threads = 0;
  bool in_process = false;
};

// Judges the file, calling `print` with each line of the verdict; returns the exit code: 0 when
// every answer matches the reference, 1 when one does not or a kernel faulted, 4 when a kernel
// could not be run. Throws InputError for a bad file or options, DeviceUnavailable when the
// device is not there.
[[nodiscard]] int judge_replay(const ReplayJudgeOptions& o, const PluginLibrary* plugin,
                               const std::string& kernels,
                               const std::function<void(const std::string&)>& print);

} // namespace attn
