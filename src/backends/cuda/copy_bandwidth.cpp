// A cudaMemcpyAsync on its own stream, timed with events like the runs (see copy_bandwidth.h);
// it borrows DeviceBuffer and Event from device_runs.h.
#include "src/backends/cuda/copy_bandwidth.h"

#include <cstddef>

#include <cuda_runtime_api.h>

#include "src/backends/cuda/cuda_check.h"
#include "src/backends/cuda/device_runs.h"

namespace attn::cuda {

CopyBandwidth measure_copy_bandwidth(int device, int64_t buffer_bytes, const TimingOptions& opt) {
  ATTN_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  ATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } guard{stream};
  DeviceBuffer src{std::size_t(buffer_bytes)};
  DeviceBuffer dst{std::size_t(buffer_bytes)};
  ATTN_CUDA_CHECK(cudaMemsetAsync(src.get(), 1, std::size_t(buffer_bytes), stream));
  Event start;
  Event stop;
  auto copy = [&]() {
    ATTN_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), std::size_t(buffer_bytes),
                                    cudaMemcpyDeviceToDevice, stream));
  };
  auto one_rep = [&]() {
    ATTN_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    copy();
    ATTN_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    ATTN_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0.0f;
    ATTN_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    return double(ms) * 1e-3;
  };
  auto warm_one = [&]() {
    copy();
    ATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  };
  CopyBandwidth r;
  r.buffer_bytes = buffer_bytes;
  r.timing = measure(one_rep, warm_one, opt, "cuda-events, cudaMemcpyAsync device to device");
  r.bytes_per_s = r.timing.median_s > 0 ? 2.0 * double(buffer_bytes) / r.timing.median_s : 0.0;
  return r;
}

} // namespace attn::cuda
