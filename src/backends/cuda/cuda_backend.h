// The CUDA backend: kernels/decode.cuh and kernels/prefill.cuh compiled by NVRTC for the device's
// architecture, run through the static CUDA runtime's library API (no libcuda at link time).
#pragma once
#include <memory>
#include <vector>

#include "src/backends/backend.h"
#include "src/backends/cuda/decode_launch.h"
#include "src/backends/cuda/nvrtc_compiler.h"
#include "src/backends/cuda/prefill_launch.h"

namespace attn {

// GPU `index`; throws DeviceUnavailable with the reason when there is no such device.
[[nodiscard]] std::unique_ptr<Backend> make_cuda_backend(int index);

// What the CUDA kernels declare: their families (HND caches, lse written) and the values the
// tuner tries; which of them a problem's shape is offered is decode_config_space's and
// prefill_config_space's rule.
[[nodiscard]] const KernelSetDecl& cuda_kernels_declaration();

namespace cuda {

// The architecture NVRTC targets for a device of compute capability `cc` (major*10 + minor),
// given the real architectures NVRTC supports: SASS for cc itself when supported, else PTX for
// the newest supported one below it (the driver JIT-compiles it). `cubin` says which.
struct TargetArch {
  int arch = 0;
  bool cubin = true;
};
[[nodiscard]] TargetArch pick_target_arch(int cc, const std::vector<int>& supported);
[[nodiscard]] std::vector<int> nvrtc_supported_archs();

// The NVRTC request that builds variant `v` from the embedded kernels/decode.cuh for `target`:
// exactly what the backend compiles, so that tests and cache warm-ups compile the same thing.
[[nodiscard]] CompileRequest decode_compile_request(const DecodeVariant& v,
                                                    const TargetArch& target);

// The same for variant `v` of kernels/prefill.cuh.
[[nodiscard]] CompileRequest prefill_compile_request(const PrefillVariant& v,
                                                     const TargetArch& target);

// kernels/timing.cuh, the helper kernels of GPU timing (the L2 flush and the stream hold), for
// `target`, and their entry points.
[[nodiscard]] CompileRequest timing_helpers_compile_request(const TargetArch& target);
inline constexpr const char* kL2FlushEntry = "attn_l2_flush";
inline constexpr const char* kHoldStreamEntry = "attn_hold_stream";

} // namespace cuda
} // namespace attn
