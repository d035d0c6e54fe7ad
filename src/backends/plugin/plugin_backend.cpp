// Host-memory plugins: the plugin's call over the run's copy of the problem, its workspace
// allocated once, timed by the host harness like the CPU backend's runs.
#include "src/backends/plugin/plugin_backend.h"

#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "src/backends/host/host_info.h"
#include "src/backends/host/host_run.h"
#include "src/model/errors.h"

namespace attn {

PluginBackend::PluginBackend(std::shared_ptr<const PluginLibrary> lib, DeviceInfo info)
    : lib_(std::move(lib)), info_(std::move(info)) {
  // The plugin's init (a Python module's import) runs here, in the process that runs the kernels,
  // outside any run: an init that fails here ends the command instead of failing every run.
  lib_->load();
}

std::optional<std::string> PluginBackend::refuse(const KernelConfig& cfg, const Problem& pr) const {
  const FamilyDecl& fam = *lib_->family(cfg.family);
  PluginHostArrays arrays;
  return lib_->can_run(cfg, plugin_call_shape(pr, cfg.family, fam.layout, host_threads(), arrays));
}

namespace {

class HostPluginRun final : public HostRun {
public:
  HostPluginRun(std::shared_ptr<const PluginLibrary> lib, const Problem& pr,
                const KernelConfig& cfg, const FamilyDecl& fam, const DeviceInfo& info, int threads)
      : HostRun(pr, fam.writes_lse, info.l2_bytes), lib_(std::move(lib)), cfg_(cfg),
        threads_(threads) {
    call_ = plugin_call_shape(pr_, cfg.family, fam.layout, threads, arrays_);
    ws_bytes_ = lib_->workspace_size(cfg_, call_);
    try {
      ws_ = std::make_unique<HostBuffer>(std::size_t(ws_bytes_));
    } catch (const std::bad_alloc&) {
      throw std::runtime_error("the workspace the plugin asks for, " + std::to_string(ws_bytes_) +
                               " bytes, cannot be allocated in host memory");
    }
    call_.query = pr_.query.raw();
    call_.key_cache = pr_.key_cache.raw();
    call_.value_cache = pr_.value_cache.raw();
    call_.block_tables = pr_.block_tables.data();
    if (pr_.phase == Phase::decode) {
      call_.context_lens = pr_.context_lens.data();
    } else {
      call_.cu_seqlens_q = pr_.cu_seqlens_q.data();
      call_.cu_seqlens_k = pr_.cu_seqlens_k.data();
    }
    call_.out = out_data();
    call_.lse = lse_data();
    if (call_.num_kv_scales > 0) {
      call_.k_scale = arrays_.k_scale.data();
      call_.v_scale = arrays_.v_scale.data();
    }
    // The plugin's untimed prepare step (ABI 2), once, with every buffer in place.
    prepared_ = std::make_unique<PluginPrepared>(lib_, cfg_, call_, ws_->get(), ws_bytes_, nullptr);
    call_.prepared = prepared_->handle();
  }

  void run() override { lib_->run(cfg_, call_, ws_->get(), ws_bytes_, nullptr); }
  // Not after a prepare step: the plugin may read its own copy of the cache, laid out there.
  bool negate_inputs() override { return !lib_->has_prepare() && HostRun::negate_inputs(); }
  // The lengths and scales the call points at are arrays_'.
  [[nodiscard]] std::vector<std::pair<std::string, uint64_t>> input_digests() const override {
    auto d = HostRun::input_digests();
    d.emplace_back("the lengths the call points at",
                   input_digest(arrays_.q) ^ input_digest(arrays_.k) * 3);
    d.emplace_back("the fp8 scales the call points at",
                   input_digest(arrays_.k_scale) ^ input_digest(arrays_.v_scale) * 3);
    return d;
  }
  // The scales the call points at are arrays_' (NaN past per-tensor ones stays NaN).
  bool rescale_inputs(bool back) override {
    if (lib_->has_prepare() || !HostRun::rescale_inputs(back)) {
      return false;
    }
    for (auto* s : {&arrays_.k_scale, &arrays_.v_scale}) {
      for (float& x : *s) {
        x = back ? x * 0.5f : x * 2.0f;
      }
    }
    return true;
  }

private:
  int call_threads() const override { return threads_; } // what the call offers it (host_threads)
  // The workspace too: a kernel that reads partials nobody wrote gets NaN.
  void poison_scratch() override { std::memset(ws_->get(), 0xff, std::size_t(ws_bytes_)); }
  // The workspace and what the prepare step laid out: the plugin's own copy of the cache is
  // evicted before each rep like attn-tune's.
  std::vector<HostRange> scratch() const override {
    std::vector<HostRange> r = {{ws_->get(), std::size_t(ws_bytes_)}};
    for (const attn_memory_range& m : prepared_->ranges()) {
      r.push_back({m.ptr, std::size_t(m.bytes)});
    }
    return r;
  }
  std::string method() const override {
    std::string m = "steady_clock, plugin " + lib_->identity().name + " on " +
                    std::to_string(threads_) + " threads";
    if (lib_->has_prepare()) {
      m += ", prepared untimed (" + mib_text(prepared_->bytes()) + " of its own memory)";
    }
    return m;
  }

  std::shared_ptr<const PluginLibrary> lib_;
  KernelConfig cfg_;
  int threads_ = 1;
  PluginHostArrays arrays_; // what call_'s lengths and scales point into
  attn_call call_{};
  uint64_t ws_bytes_ = 0;
  std::unique_ptr<HostBuffer> ws_;
  std::unique_ptr<PluginPrepared> prepared_;
};

class HostPluginBackend final : public PluginBackend {
public:
  using PluginBackend::PluginBackend;

protected:
  std::unique_ptr<PreparedRun> make_run(const Problem& pr, const KernelConfig& cfg,
                                        const FamilyDecl& fam) override {
    return std::make_unique<HostPluginRun>(lib_, pr, cfg, fam, info_, host_threads());
  }
};

} // namespace

std::unique_ptr<Backend> make_host_plugin_backend(std::shared_ptr<const PluginLibrary> lib,
                                                  int threads) {
  if (threads < 0) {
    throw InputError("threads " + std::to_string(threads) + " must be >= 0 (0: all)");
  }
  return std::make_unique<HostPluginBackend>(std::move(lib), cpu_device_info(threads));
}

} // namespace attn
