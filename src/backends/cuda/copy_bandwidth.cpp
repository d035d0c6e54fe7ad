// A cudaMemcpyAsync timed exactly like the runs (see copy_bandwidth.h): the same DeviceStream,
// so the same clean-read L2 flush, held stream, warm-up and clock readings.
#include "src/backends/cuda/copy_bandwidth.h"

#include <cstddef>
#include <string>

#include <cuda_runtime_api.h>

#include "src/backends/cuda/cuda_backend.h"
#include "src/backends/cuda/cuda_check.h"
#include "src/backends/cuda/cuda_devices.h"
#include "src/backends/cuda/device_runs.h"
#include "src/model/errors.h"

namespace attn::cuda {

CopyBandwidth measure_copy_bandwidth(int device, int64_t buffer_bytes, const TimingOptions& opt) {
  std::string why;
  const std::vector<DeviceInfo> devices = cuda_devices(why);
  if (device < 0 || device >= int(devices.size())) {
    throw DeviceUnavailable(devices.empty() ? why : "no CUDA device " + std::to_string(device));
  }
  const DeviceInfo& d = devices[std::size_t(device)];
  DeviceStream stream(device, d.l2_bytes, d.uuid,
                      pick_target_arch(d.cc_major * 10 + d.cc_minor, nvrtc_supported_archs()));
  DeviceBuffer src{std::size_t(buffer_bytes)};
  DeviceBuffer dst{std::size_t(buffer_bytes)};
  ATTN_CUDA_CHECK(cudaMemsetAsync(src.get(), 1, std::size_t(buffer_bytes), stream.get()));
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  CopyBandwidth r;
  r.buffer_bytes = buffer_bytes;
  r.timing = stream.time(
      [&] {
        ATTN_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), std::size_t(buffer_bytes),
                                        cudaMemcpyDeviceToDevice, stream.get()));
      },
      opt, "cuda-events, cudaMemcpyAsync device to device");
  r.bytes_per_s = r.timing.median_s > 0 ? 2.0 * double(buffer_bytes) / r.timing.median_s : 0.0;
  return r;
}

} // namespace attn::cuda
