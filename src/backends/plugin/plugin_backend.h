// Kernel sets over a kernel plugin: the declarations, can_run and runs come from the plugin, the
// problem arrives in the layout each family declares (the contract's prepare), and validation,
// timing and fault isolation are the built-in kernels' own. A host-memory plugin runs through the
// host harness (host/host_run.h); a CUDA plugin through the CUDA harness (cuda/device_runs.h) in
// cuda_plugin_run.cpp.
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
  [[nodiscard]] const KernelSetDecl& declaration() const override { return lib_->declaration(); }
  [[nodiscard]] nlohmann::json kernels() const override { return lib_->identity().to_json(); }

protected:
  // The plugin's own can_run on the call's shape (its parameters checked against what it
  // declares first).
  [[nodiscard]] std::optional<std::string> refuse(const KernelConfig& cfg,
                                                  const Problem& pr) const override;
  [[nodiscard]] std::string refuser() const override { return "plugin " + lib_->identity().name; }
  [[nodiscard]] int host_threads() const { return info_.threads > 0 ? info_.threads : 1; }

  std::shared_ptr<const PluginLibrary> lib_;
  DeviceInfo info_;
};

// The host-memory plugin `lib` on this machine's CPU with `threads` threads (0: all).
[[nodiscard]] std::unique_ptr<Backend>
make_host_plugin_backend(std::shared_ptr<const PluginLibrary> lib, int threads);

#ifdef ATTN_HAVE_CUDA
// The CUDA plugin `lib` on GPU `index`; throws DeviceUnavailable with the reason when that
// device cannot be used.
[[nodiscard]] std::unique_ptr<Backend>
make_cuda_plugin_backend(std::shared_ptr<const PluginLibrary> lib, int index);
#endif

} // namespace attn
