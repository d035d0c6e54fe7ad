#include "src/backends/cuda/cuda_devices.h"

#ifdef ATTN_HAVE_CUDA
#include <cstdio>
#include <cuda_runtime_api.h>

#include "src/backends/cuda/device_open.h"
#endif

namespace attn {

namespace {
std::string cuda_version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
} // namespace

std::string insufficient_driver_reason(int driver_version, int runtime_version) {
  if (driver_version <= 0) {
    return "no NVIDIA driver is loaded on this machine "
           "(cudaGetDeviceCount: cudaErrorInsufficientDriver)";
  }
  return "the NVIDIA driver supports CUDA " + cuda_version_string(driver_version) +
         ", but this attn-tune's CUDA runtime is " + cuda_version_string(runtime_version) +
         " and needs a driver for CUDA " + cuda_version_string(runtime_version) +
         " or newer: update the driver (cudaGetDeviceCount: cudaErrorInsufficientDriver)";
}

#ifndef ATTN_HAVE_CUDA
std::vector<DeviceInfo> cuda_devices(std::string& why_none) {
  why_none = "this attn-tune was built without the CUDA Toolkit, so it has no GPU backend";
  return {};
}
#else

std::vector<DeviceInfo> cuda_devices(std::string& why_none) {
  std::vector<DeviceInfo> out;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError(); // clear the sticky error state of the runtime
    if (err == cudaErrorNoDevice) {
      why_none = "no CUDA device found (cudaGetDeviceCount: cudaErrorNoDevice)";
    } else if (err == cudaErrorInsufficientDriver) {
      int driver = 0;
      (void)cudaDriverGetVersion(&driver); // 0 when no driver is loaded
      why_none = insufficient_driver_reason(driver, CUDART_VERSION);
    } else {
      const auto why = cuda::device_unusable_reason(err);
      why_none = "the CUDA runtime cannot start: " +
                 (why ? *why : std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err));
    }
    return out;
  }
  if (count == 0) {
    why_none = "no CUDA device found";
    return out;
  }
  int driver = 0;
  int runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      continue;
    }
    DeviceInfo d;
    d.backend = "cuda";
    d.id = "cuda:" + std::to_string(i);
    d.name = prop.name;
    char uuid[64];
    const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
    std::snprintf(uuid, sizeof uuid,
                  "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                  u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                  u[14], u[15]);
    d.uuid = uuid;
    d.sm_count = prop.multiProcessorCount;
    d.cc_major = prop.major;
    d.cc_minor = prop.minor;
    d.memory_bytes = int64_t(prop.totalGlobalMem);
    d.l2_bytes = prop.l2CacheSize;
    d.driver_version = cuda_version_string(driver);
    d.runtime_version = cuda_version_string(runtime);
    out.push_back(d);
  }
  if (out.empty()) {
    why_none = "CUDA reported devices but none could be queried";
  }
  return out;
}
#endif

} // namespace attn
