// `attn-tune devices`: what this machine offers to attn-tune, GPUs first, then the CPU.
#include <cstdio>
#include <memory>

#include "src/backends/backend.h"
#include "src/backends/registry.h"
#include "src/cli/commands.h"

namespace attn::cli {

namespace {
struct DevicesOptions {
  int threads = 0;
  bool json = false;
};

int run_devices(const DevicesOptions& o) {
  const DeviceList l = list_devices({.threads = o.threads, .kernels = ""});
  if (o.json) {
    nlohmann::json j = {{"devices", nlohmann::json::array()}};
    for (const auto& d : l.devices) {
      j["devices"].push_back(d.to_json());
    }
    if (!l.why_no_gpu.empty()) {
      j["no_gpu_reason"] = l.why_no_gpu;
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const double gib = 1024.0 * 1024.0 * 1024.0;
  for (const auto& d : l.devices) {
    if (d.backend == "cuda") {
      std::printf("%-7s %s  sm_%d%d  %d SMs  %.1f GiB  L2 %.1f MiB  driver %s  runtime %s\n",
                  d.id.c_str(), d.name.c_str(), d.cc_major, d.cc_minor, d.sm_count,
                  double(d.memory_bytes) / gib, double(d.l2_bytes) / (1024.0 * 1024.0),
                  d.driver_version.c_str(), d.runtime_version.c_str());
    } else {
      std::printf("%-7s %s  %d threads  %.1f GiB  LLC %.1f MiB\n", d.id.c_str(), d.name.c_str(),
                  d.threads, double(d.memory_bytes) / gib, double(d.l2_bytes) / (1024.0 * 1024.0));
    }
  }
  if (!l.why_no_gpu.empty()) {
    std::printf("no GPU: %s\n", l.why_no_gpu.c_str());
  }
  return 0;
}
} // namespace

Command setup_devices(CLI::App& root) {
  auto opt = std::make_shared<DevicesOptions>();
  CLI::App* sub = root.add_subcommand("devices", "List the GPUs and the CPU attn-tune can use");
  sub->add_option("--threads", opt->threads, "CPU backend worker threads (0: all)")
      ->check(CLI::Range(0, 4096));
  sub->add_flag("--json", opt->json, "Print JSON instead of text");
  return {sub, [opt] { return run_devices(*opt); }};
}

} // namespace attn::cli
