// CUDA kernel plugins: the problem uploaded in the layout the family declares, the workspace
// allocated once, and each launch handed to the plugin's run on the backend's stream, so that
// poisoning, download, event or graph timing and sticky-error handling are DeviceRun's own.
#include <cuda_runtime_api.h>

#include "src/backends/cuda/cuda_backend.h"
#include "src/backends/cuda/cuda_check.h"
#include "src/backends/cuda/device_open.h"
#include "src/backends/cuda/device_runs.h"
#include "src/backends/plugin/plugin_backend.h"

namespace attn {

namespace cuda {
namespace {

class PluginDeviceRun final : public DeviceRun {
public:
  PluginDeviceRun(DeviceStream& stream, std::shared_ptr<const PluginLibrary> lib, const Problem& pr,
                  const KernelConfig& cfg, const FamilyDecl& fam)
      : DeviceRun(stream, pr), lib_(std::move(lib)), cfg_(cfg), writes_lse_(fam.writes_lse) {
    call_ = plugin_call_shape(pr, cfg.family, fam.layout, 0, arrays_);
    ws_bytes_ = lib_->workspace_size(cfg_, call_);
    ws_ = DeviceBuffer(std::size_t(ws_bytes_));
    upload(q_, pr.query.raw(), pr.query.data.size());
    upload(k_, pr.key_cache.raw(), pr.key_cache.data.size());
    upload(v_, pr.value_cache.raw(), pr.value_cache.data.size());
    upload(tables_, pr.block_tables.data(), pr.block_tables.size() * sizeof(int32_t));
    call_.query = q_.get();
    call_.key_cache = k_.get();
    call_.value_cache = v_.get();
    call_.block_tables = static_cast<const int32_t*>(tables_.get());
    if (pr.phase == Phase::decode) {
      upload(lens_, pr.context_lens.data(), pr.context_lens.size() * sizeof(int32_t));
      call_.context_lens = static_cast<const int32_t*>(lens_.get());
    } else {
      upload(cu_q_, pr.cu_seqlens_q.data(), pr.cu_seqlens_q.size() * sizeof(int32_t));
      upload(cu_k_, pr.cu_seqlens_k.data(), pr.cu_seqlens_k.size() * sizeof(int32_t));
      call_.cu_seqlens_q = static_cast<const int32_t*>(cu_q_.get());
      call_.cu_seqlens_k = static_cast<const int32_t*>(cu_k_.get());
    }
    call_.out = out_.get();
    call_.lse = static_cast<float*>(lse_.get());
    if (!lib_->has_prepare()) { // with one, the plugin may read its own copy of the cache
      inputs_at(q_, k_, v_, pr);
    }
    if (call_.num_kv_scales > 0) { // an fp8 cache's scales, in device memory as the caches
      upload(k_scale_, arrays_.k_scale.data(), arrays_.k_scale.size() * sizeof(float));
      upload(v_scale_, arrays_.v_scale.data(), arrays_.v_scale.size() * sizeof(float));
      call_.k_scale = static_cast<const float*>(k_scale_.get());
      call_.v_scale = static_cast<const float*>(v_scale_.get());
    }
    // The plugin's untimed prepare step (ABI 2), once, on the stream, with every buffer in place;
    // what it lays out is device memory, which the L2 flush before each rep covers like the rest.
    prepared_ = std::make_unique<PluginPrepared>(lib_, cfg_, call_, ws_.get(), ws_bytes_,
                                                 stream_.get());
    ATTN_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    call_.prepared = prepared_->handle();
  }

  TimingResult time(const TimingOptions& opt) override {
    TimingResult r = DeviceRun::time(opt);
    if (lib_->has_prepare()) {
      r.method += ", prepared untimed (" + mib_text(prepared_->bytes()) + " of its own memory)";
    }
    return r;
  }

  RunOutput download() override {
    RunOutput r = DeviceRun::download();
    r.lse_written = writes_lse_;
    return r;
  }

private:
  void launch() override {
    lib_->run(cfg_, call_, ws_.get(), ws_bytes_, stream_.get());
    // A launch the plugin did not check is caught here, as a built-in launch would be.
    ATTN_CUDA_CHECK(cudaPeekAtLastError());
  }

  std::shared_ptr<const PluginLibrary> lib_;
  KernelConfig cfg_;
  bool writes_lse_ = false;
  PluginHostArrays arrays_; // what call_'s lengths point into (host memory), and the scales
  attn_call call_{};
  uint64_t ws_bytes_ = 0;
  DeviceBuffer q_, k_, v_, tables_, lens_, cu_q_, cu_k_, k_scale_, v_scale_;
  std::unique_ptr<PluginPrepared> prepared_; // after the buffers: released before they are freed
};

class CudaPluginBackend final : public PluginBackend {
public:
  CudaPluginBackend(std::shared_ptr<const PluginLibrary> lib, int index, DeviceInfo info)
      : PluginBackend(std::move(lib), std::move(info)),
        stream_(index, info_.l2_bytes, info_.uuid,
                pick_target_arch(info_.cc_major * 10 + info_.cc_minor, nvrtc_supported_archs())) {}

protected:
  std::unique_ptr<PreparedRun> make_run(const Problem& pr, const KernelConfig& cfg,
                                        const FamilyDecl& fam) override {
    return std::make_unique<PluginDeviceRun>(stream_, lib_, pr, cfg, fam);
  }

private:
  DeviceStream stream_;
};

} // namespace
} // namespace cuda

std::unique_ptr<Backend> make_cuda_plugin_backend(std::shared_ptr<const PluginLibrary> lib,
                                                  int index) {
  DeviceInfo info = cuda::open_cuda_device(index);
  return std::make_unique<cuda::CudaPluginBackend>(std::move(lib), index, std::move(info));
}

} // namespace attn
