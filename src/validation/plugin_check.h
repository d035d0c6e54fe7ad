// `attn-tune plugin check`'s judging: one tiny case per family and mask option (GQA, ragged
// lengths across block edges and every declared partition's boundary, fp16; prefill with a
// chunked sequence), each run through the checked run on every configuration the plugin
// declares, judged in plain words.
#pragma once
#include <functional>
#include <string>

#include "src/backends/backend.h"
#include "src/backends/plugin/plugin_library.h"

namespace attn {

struct PluginCheckResult {
  int families = 0; // families checked
  int failed = 0;   // families with a failing, erroneous or crashing case
  std::string teardown_failure; // what the plugin's destroy did when it crashed or hung
};

// Checks every family `lib` declares on the device `spec`, in supervised workers (or in this
// process), calling `print` with each line as its case ends ("  decode_v1: ok (causal) with
// ..."). Throws what opening the device throws.
[[nodiscard]] PluginCheckResult check_plugin(const PluginLibrary& lib, const std::string& spec,
                                             const BackendOptions& bo, bool in_process,
                                             const std::function<void(const std::string&)>& print);

} // namespace attn
