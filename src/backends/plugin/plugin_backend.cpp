#include "src/backends/plugin/plugin_backend.h"

#include <cstring>

#include "src/backends/cpu/cpu_backend.h"
#include "src/backends/cpu/cpu_info.h"
#include "src/backends/registry.h"
#include "src/model/errors.h"

#ifdef ATTN_HAVE_CUDA
#include "src/backends/cuda/cuda_backend.h"
#endif

namespace attn {

PluginBackend::PluginBackend(std::shared_ptr<const PluginLibrary> lib, DeviceInfo info)
    : lib_(std::move(lib)), info_(std::move(info)) {}

std::vector<KernelConfig> PluginBackend::config_space(Family f, const AttnParams& p) const {
  (void)p;
  return lib_->config_space(f);
}

std::optional<std::string> PluginBackend::can_run(const KernelConfig& cfg,
                                                  const Problem& pr) const {
  const char* fam = family_name(cfg.family);
  if (auto why = phase_mismatch(cfg.family, pr.phase)) {
    return why;
  }
  const PluginFamily* pf = lib_->family(cfg.family);
  if (pf == nullptr) {
    return "plugin " + lib_->identity().name + " does not implement " + fam;
  }
  if (pf->layout == KvLayout::vllm) {
    const int x = 16 / int(dtype_size(pr.params.dtype));
    if (pr.params.head_dim % x != 0) {
      return "the vllm layout needs head_dim to be a multiple of " + std::to_string(x) +
             " (16 bytes of " + std::string(dtype_name(pr.params.dtype)) + "), not " +
             std::to_string(pr.params.head_dim);
    }
  }
  return lib_->can_run(cfg, plugin_call_shape(pr, cfg.family, pf->layout, host_threads()));
}

std::unique_ptr<PreparedRun> PluginBackend::prepare(const Problem& pr, const KernelConfig& cfg) {
  pr.validate();
  if (auto why = can_run(cfg, pr)) {
    throw InputError("cannot run " + cfg.key() + " with plugin " + lib_->identity().name + ": " +
                     *why);
  }
  const PluginFamily& fam = *lib_->family(cfg.family);
  if (pr.kv_layout == fam.layout) {
    return make_run(pr, cfg, fam);
  }
  return make_run(with_kv_layout(pr, fam.layout), cfg, fam);
}

namespace {

// Memory that a host plugin's call reads and writes; 64-byte aligned, like a device buffer.
class HostBuffer {
public:
  explicit HostBuffer(std::size_t bytes) : words_((bytes + 63) / 64 + 1) {}
  [[nodiscard]] void* get() {
    auto p = reinterpret_cast<std::uintptr_t>(words_.data());
    return reinterpret_cast<void*>((p + 63) & ~std::uintptr_t(63));
  }

private:
  struct alignas(64) Line {
    unsigned char b[64];
  };
  std::vector<Line> words_;
};

class HostPluginRun final : public PreparedRun {
public:
  HostPluginRun(std::shared_ptr<const PluginLibrary> lib, const Problem& pr,
                const KernelConfig& cfg, const PluginFamily& fam, const DeviceInfo& info,
                int threads)
      : lib_(std::move(lib)), pr_(pr), cfg_(cfg), writes_lse_(fam.writes_lse),
        llc_bytes_(info.l2_bytes), threads_(threads) {
    const AttnParams& p = pr_.params;
    out_ = HostTensor(p.dtype, {pr_.num_rows(), p.num_heads, p.head_dim});
    lse_.assign(std::size_t(pr_.num_rows()) * p.num_heads, 0.0f);
    call_ = plugin_call_shape(pr_, cfg.family, fam.layout, threads);
    ws_bytes_ = lib_->workspace_size(cfg_, call_);
    ws_ = std::make_unique<HostBuffer>(std::size_t(ws_bytes_));
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
    call_.out = out_.raw();
    call_.lse = lse_.data();
  }

  void poison_outputs() override {
    poison(out_);
    poison(lse_);
    // The workspace too: a kernel that reads partials nobody wrote gets NaN.
    std::memset(ws_->get(), 0xff, std::size_t(ws_bytes_));
  }

  void run() override { lib_->run(cfg_, call_, ws_->get(), ws_bytes_, nullptr); }

  RunOutput download() override { return {out_, lse_, writes_lse_}; }

  TimingResult time(const TimingOptions& opt) override {
    std::vector<HostRange> touched = problem_read_ranges(pr_);
    touched.push_back({out_.raw(), out_.data.size()});
    touched.push_back({lse_.data(), lse_.size() * sizeof(float)});
    touched.push_back({ws_->get(), std::size_t(ws_bytes_)});
    return time_host_call([this] { run(); }, opt, llc_bytes_,
                          "steady_clock, plugin " + lib_->identity().name + " on " +
                              std::to_string(threads_) + " threads",
                          touched);
  }

private:
  std::shared_ptr<const PluginLibrary> lib_;
  Problem pr_; // our copy, in the plugin's layout: the "upload"
  KernelConfig cfg_;
  bool writes_lse_ = false;
  int64_t llc_bytes_ = 0;
  int threads_ = 1;
  HostTensor out_;
  std::vector<float> lse_;
  attn_call call_{};
  uint64_t ws_bytes_ = 0;
  std::unique_ptr<HostBuffer> ws_;
};

class HostPluginBackend final : public PluginBackend {
public:
  using PluginBackend::PluginBackend;

protected:
  std::unique_ptr<PreparedRun> make_run(const Problem& pr, const KernelConfig& cfg,
                                        const PluginFamily& fam) override {
    return std::make_unique<HostPluginRun>(lib_, pr, cfg, fam, info_, host_threads());
  }
};

} // namespace

std::unique_ptr<Backend> make_plugin_backend(std::shared_ptr<const PluginLibrary> lib,
                                             const std::string& spec, const BackendOptions& opt) {
  const PluginIdentity& id = lib->identity();
  if (id.device_kind == ATTN_DEVICE_HOST) {
    if (spec != "cpu") {
      throw InputError("plugin " + id.name + " runs on host memory: use --device cpu, not '" +
                       spec + "'");
    }
    if (opt.threads < 0) {
      throw InputError("threads " + std::to_string(opt.threads) + " must be >= 0 (0: all)");
    }
    DeviceInfo info = cpu_device_info(opt.threads);
    return std::make_unique<HostPluginBackend>(std::move(lib), std::move(info));
  }
  if (spec == "cpu") {
    throw InputError("plugin " + id.name + " runs on CUDA devices: use --device cuda:N, not 'cpu'");
  }
#ifdef ATTN_HAVE_CUDA
  const int index = parse_gpu_index(spec);
  if (index < 0) {
    throw InputError("device '" + spec + "' is not 'cpu', 'cuda:N' or a GPU index N");
  }
  return make_cuda_plugin_backend(std::move(lib), index);
#else
  throw DeviceUnavailable("plugin " + id.name +
                          " runs on CUDA devices, and this build has no CUDA backend");
#endif
}

std::string default_plugin_device(const PluginLibrary& lib) {
  return lib.identity().device_kind == ATTN_DEVICE_HOST ? "cpu" : "cuda:0";
}

} // namespace attn
