// Backends over a kernel plugin: configuration spaces, can_run and runs come from the plugin,
// the problem is handed over in the layout each family declares, and validation, timing and
// fault isolation are the same as for the built-in kernels. A host-memory plugin runs on the
// CPU device; a CUDA plugin on a GPU (src/backends/cuda/plugin_device_run.cpp).
#pragma once
#include <memory>
#include <string>

#include "src/backends/backend.h"
#include "src/backends/plugin/plugin_library.h"

namespace attn {

// What both kinds of plugin backend share; a kind adds how a run is made.
class PluginBackend : public Backend {
public:
  PluginBackend(std::shared_ptr<const PluginLibrary> lib, DeviceInfo info);
  [[nodiscard]] const DeviceInfo& info() const override { return info_; }
  [[nodiscard]] std::vector<KernelConfig> config_space(Family f,
                                                       const AttnParams& p) const override;
  [[nodiscard]] std::optional<std::string> can_run(const KernelConfig& cfg,
                                                   const Problem& pr) const override;
  [[nodiscard]] nlohmann::json kernels() const override { return lib_->identity().to_json(); }
  // Converts the problem to the family's layout, then make_run.
  [[nodiscard]] std::unique_ptr<PreparedRun> prepare(const Problem& pr,
                                                     const KernelConfig& cfg) override;

protected:
  // `pr` is already in the family's layout and can_run accepted it.
  [[nodiscard]] virtual std::unique_ptr<PreparedRun>
  make_run(const Problem& pr, const KernelConfig& cfg, const PluginFamily& fam) = 0;
  [[nodiscard]] int host_threads() const { return info_.threads > 0 ? info_.threads : 1; }

  std::shared_ptr<const PluginLibrary> lib_;
  DeviceInfo info_;
};

// The backend for `lib` on device `spec` ("cpu" for host-memory plugins, "cuda:N" or "N" for
// CUDA ones). Throws InputError when the plugin cannot run on that kind of device, and
// DeviceUnavailable when the device is not there.
[[nodiscard]] std::unique_ptr<Backend> make_plugin_backend(std::shared_ptr<const PluginLibrary> lib,
                                                           const std::string& spec,
                                                           const BackendOptions& opt);

// The device a command uses for `lib` when none is named: the CPU for host-memory plugins, GPU 0
// for CUDA ones.
[[nodiscard]] std::string default_plugin_device(const PluginLibrary& lib);

} // namespace attn
