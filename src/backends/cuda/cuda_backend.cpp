// The CUDA backend (cuda_backend.h): it reads the device's limits, answers can_run from the
// host rules and then the compiled kernels (module_cache.h), and prepares runs (device_runs.h).
#include "src/backends/cuda/cuda_backend.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include <cuda_runtime_api.h>

#include "src/backends/cuda/cuda_check.h"
#include "src/backends/cuda/cuda_devices.h"
#include "src/backends/cuda/device_open.h"
#include "src/backends/cuda/device_runs.h"
#include "src/backends/cuda/embedded_kernels.h"
#include "src/backends/cuda/module_cache.h"
#include "src/backends/cuda/nvrtc_library.h"
#include "src/backends/cuda/precompile.h"
#include "src/model/errors.h"

namespace attn {

namespace cuda {

TargetArch pick_target_arch(int cc, const std::vector<int>& supported) {
  if (std::find(supported.begin(), supported.end(), cc) != supported.end()) {
    return {cc, true};
  }
  int best = 0;
  for (int a : supported) {
    if (a <= cc) {
      best = std::max(best, a);
    }
  }
  if (best == 0) {
    throw DeviceUnavailable("NVRTC " + nvrtc_version() + " cannot generate code for sm_" +
                            std::to_string(cc) + " (oldest supported: sm_" +
                            std::to_string(supported.empty() ? 0 : supported.front()) + ")");
  }
  return {best, false};
}

std::vector<int> nvrtc_supported_archs() {
  const NvrtcApi& api = nvrtc();
  int n = 0;
  if (api.get_num_supported_archs(&n) != NVRTC_SUCCESS || n <= 0) {
    return {};
  }
  std::vector<int> archs(std::size_t(n), 0);
  if (api.get_supported_archs(archs.data()) != NVRTC_SUCCESS) {
    return {};
  }
  std::sort(archs.begin(), archs.end());
  return archs;
}

namespace {
// The NVRTC request of one kernel file with a variant's defines, for one target.
CompileRequest kernel_compile_request(const char* file, std::vector<std::string> defines,
                                      std::string description, const TargetArch& target) {
  CompileRequest req;
  req.source_name = file;
  req.source = embedded_kernel(file);
  req.headers = embedded_kernel_headers();
  req.options = std::move(defines);
  req.arch = target.arch;
  req.cubin = target.cubin;
  req.description = std::move(description);
  return req;
}
} // namespace

CompileRequest decode_compile_request(const DecodeVariant& v, const TargetArch& target) {
  return kernel_compile_request("decode.cuh", v.defines(), v.describe(), target);
}

CompileRequest prefill_compile_request(const PrefillVariant& v, const TargetArch& target) {
  return kernel_compile_request("prefill.cuh", v.defines(), v.describe(), target);
}

CompileRequest timing_helpers_compile_request(const TargetArch& target) {
  return kernel_compile_request("timing.cuh", {"-std=c++17"}, "timing helpers", target);
}

namespace {

// What device `device` allows a launch, for the host rules of both families.
CudaLimits read_limits(int device, int cc) {
  ATTN_CUDA_CHECK(cudaSetDevice(device));
  CudaLimits lim;
  lim.cc = cc;
  auto attribute = [device](cudaDeviceAttr attr) {
    int v = 0;
    ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, device));
    return v;
  };
  lim.smem_per_block = attribute(cudaDevAttrMaxSharedMemoryPerBlock);
  lim.smem_optin = attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  lim.max_threads_per_block = attribute(cudaDevAttrMaxThreadsPerBlock);
  lim.regs_per_block = attribute(cudaDevAttrMaxRegistersPerBlock);
  lim.max_grid_x = attribute(cudaDevAttrMaxGridDimX);
  lim.max_grid_y = attribute(cudaDevAttrMaxGridDimY);
  lim.max_grid_z = attribute(cudaDevAttrMaxGridDimZ);
  return lim;
}

class CudaBackend final : public Backend {
public:
  CudaBackend(int index, DeviceInfo info)
      : info_(std::move(info)), lim_(read_limits(index, info_.cc_major * 10 + info_.cc_minor)),
        target_(pick_target_arch(lim_.cc, nvrtc_supported_archs())),
        modules_(index, info_.id + " (" + info_.name + ")"),
        stream_(index, info_.l2_bytes, info_.uuid, target_) {}
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  // Modules are unloaded before the stream goes.
  ~CudaBackend() override { modules_.clear(); }

  [[nodiscard]] const DeviceInfo& info() const override { return info_; }

  [[nodiscard]] const KernelSetDecl& declaration() const override {
    return cuda_kernels_declaration();
  }

  // Every distinct variant of the plan compiled into the disk cache on all cores, so that the
  // sweep's can_run and prepare only load modules. Loading stays with each configuration: a
  // module that fails to load then costs that configuration, not the sweep.
  void prepare_plan(const std::vector<PlanItem>& plan,
                    const std::function<void(int done, int total)>& progress) override {
    std::set<std::string> seen;
    std::vector<CompileRequest> requests;
    for (const auto& item : plan) {
      CompileRequest req =
          item.config.family == Family::prefill
              ? prefill_compile_request(prefill_variant(item.config, item.params), target_)
              : decode_compile_request(decode_variant(item.config, item.params), target_);
      if (seen.insert(req.description).second) {
        requests.push_back(std::move(req));
      }
    }
    const int total = int(requests.size());
    if (progress) {
      progress(0, total);
    }
    (void)precompile(requests, [&](int done) {
      if (progress) {
        progress(done, total);
      }
    });
  }

protected:
  [[nodiscard]] bool offers(const KernelConfig& cfg, const AttnParams& p) const override {
    return cfg.family == Family::prefill ? prefill_offers(cfg, p) : decode_offers(cfg, p);
  }

  // The host rules, then the compiled kernel's registers and spills.
  [[nodiscard]] std::optional<std::string> refuse(const KernelConfig& cfg,
                                                  const Problem& pr) const override {
    if (auto why = refuse_unbuilt(cfg, pr)) {
      return why;
    }
    if (cfg.family == Family::prefill) {
      return modules_.can_run(module_spec(prefill_variant(cfg, pr.params), target_),
                              lim_.regs_per_block);
    }
    return modules_.can_run(module_spec(decode_variant(cfg, pr.params), target_),
                            lim_.regs_per_block);
  }

  // The host rules alone: no compile.
  [[nodiscard]] std::optional<std::string> refuse_unbuilt(const KernelConfig& cfg,
                                                          const Problem& pr) const override {
    return cfg.family == Family::prefill ? prefill_static_can_run(cfg, pr, lim_)
                                         : decode_static_can_run(cfg, pr, lim_);
  }

  [[nodiscard]] std::unique_ptr<PreparedRun> make_run(const Problem& pr, const KernelConfig& cfg,
                                                      const FamilyDecl&) override {
    if (cfg.family == Family::prefill) {
      const PrefillVariant v = prefill_variant(cfg, pr.params);
      return std::make_unique<PrefillRun>(stream_, pr, v, modules_.get(module_spec(v, target_)));
    }
    const DecodeVariant v = decode_variant(cfg, pr.params);
    return std::make_unique<DecodeRun>(stream_, pr, v, modules_.get(module_spec(v, target_)));
  }

private:
  DeviceInfo info_;
  CudaLimits lim_;
  TargetArch target_;
  ModuleCache modules_;
  DeviceStream stream_;
};

} // namespace

} // namespace cuda

const KernelSetDecl& cuda_kernels_declaration() {
  // The kernels follow vLLM's paged_attention v1/v2 (grid, partition 512, reduce): its rule is
  // the one they replace.
  static const KernelSetDecl decl{"attn-tune",
                                  MemoryKind::cuda,
                                  {cuda::decode_family(Family::decode_v1),
                                   cuda::decode_family(Family::decode_v2), cuda::prefill_family()},
                                  "vllm-cuda"};
  return decl;
}

std::unique_ptr<Backend> make_cuda_backend(int index) {
  DeviceInfo info = cuda::open_cuda_device(index);
  return std::make_unique<cuda::CudaBackend>(index, std::move(info));
}

} // namespace attn
