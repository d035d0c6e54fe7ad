// The CUDA backend: decode kernels compiled by NVRTC for the device's architecture, run through
// the statically linked CUDA runtime (library management API, so no libcuda at link time).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/backends/backend.h"
#include "src/backends/cuda/decode_launch.h"
#include "src/backends/cuda/nvrtc_compiler.h"
#include "src/backends/cuda/prefill_launch.h"
#include "src/backends/timing.h"

namespace attn {

// GPU `index`; throws DeviceUnavailable with the reason when there is no such device.
[[nodiscard]] std::unique_ptr<Backend> make_cuda_backend(int index);

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

// Compiles `variants` for a device of compute capability `cc` on all CPU cores into the disk
// cache, so that the backend's own compiles (one at a time, on first use) become cache hits.
// Returns how many failed to compile (can_run reports each with its reason later).
int precompile_decode(const std::vector<DecodeVariant>& variants, int cc);
// The same for prefill variants.
int precompile_prefill(const std::vector<PrefillVariant>& variants, int cc);

// Device-to-device copy bandwidth of GPU `device`, counting bytes read plus bytes written, the
// ceiling that a memory-bound kernel is compared with.
struct CopyBandwidth {
  int64_t buffer_bytes = 0;
  double bytes_per_s = 0.0; // 2 * buffer_bytes / median time
  TimingResult timing;
};
[[nodiscard]] CopyBandwidth measure_copy_bandwidth(int device, int64_t buffer_bytes,
                                                   const TimingOptions& opt);

} // namespace cuda
} // namespace attn
