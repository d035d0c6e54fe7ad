// Device opening and the errors that make a device unusable (see device_open.h).
#include "src/backends/cuda/device_open.h"

#include "src/backends/cuda/cuda_check.h"
#include "src/backends/cuda/cuda_devices.h"
#include "src/model/errors.h"

namespace attn::cuda {

namespace {
std::optional<std::string> reason_text(cudaError_t err) {
  switch (err) {
  case cudaErrorDevicesUnavailable:
    return "the GPU is busy or closed to new work: its compute mode is exclusive-process and "
           "another process holds it, or prohibited (nvidia-smi -q -d COMPUTE shows the mode)";
  case cudaErrorNoDevice:
    return "no CUDA device is visible (check CUDA_VISIBLE_DEVICES and the driver)";
  case cudaErrorInvalidDevice:
    return "no such CUDA device";
  case cudaErrorInsufficientDriver:
    return "the NVIDIA driver is missing or older than this attn-tune's CUDA runtime needs";
  case cudaErrorCallRequiresNewerDriver:
    return "the NVIDIA driver is older than this attn-tune's CUDA runtime needs";
  case cudaErrorSystemDriverMismatch:
    return "the loaded NVIDIA kernel module and the user-space driver library are different "
           "versions (reload the module or reboot)";
  case cudaErrorCompatNotSupportedOnDevice:
    return "the CUDA forward-compatibility driver in use does not support this GPU";
  case cudaErrorSystemNotReady:
    return "the system is not ready for CUDA (on NVSwitch systems: is nvidia-fabricmanager "
           "running?)";
  case cudaErrorInitializationError:
    return "the CUDA driver failed to initialise (is the NVIDIA kernel module loaded and "
           "/dev/nvidia* readable?)";
  case cudaErrorNotPermitted:
    return "this process is not permitted to use the GPU";
  case cudaErrorDeviceNotLicensed:
    return "the virtual GPU has no valid licence";
  case cudaErrorIncompatibleDriverContext:
    return "a context this process already made through the driver API is incompatible with "
           "the CUDA runtime";
  case cudaErrorECCUncorrectable:
  case cudaErrorNvlinkUncorrectable:
    return "the GPU reported an uncorrectable hardware error and needs a reset";
  case cudaErrorMemoryAllocation:
    return "the GPU has no memory left for a new context (other processes hold it)";
  case cudaErrorMpsConnectionFailed:
  case cudaErrorMpsServerNotReady:
  case cudaErrorMpsRpcFailure:
    return "the CUDA MPS server cannot be reached or is not ready";
  case cudaErrorMpsMaxClientsReached:
  case cudaErrorMpsMaxConnectionsReached:
    return "the CUDA MPS server takes no more clients";
  default:
    return std::nullopt;
  }
}
} // namespace

std::optional<std::string> device_unusable_reason(cudaError_t err) {
  std::optional<std::string> why = reason_text(err);
  if (why) {
    *why += std::string(" (") + cudaGetErrorName(err) + ")";
  }
  return why;
}

void open_device(int device, const std::string& label) {
  const auto check = [&label](cudaError_t err, const char* call, int line) {
    if (err == cudaSuccess) {
      return;
    }
    (void)cudaGetLastError(); // a failed open must not poison the next runtime call
    if (const auto why = device_unusable_reason(err)) {
      throw DeviceUnavailable(label + " cannot be used: " + *why + " in " + call);
    }
    throw_cuda_error(err, call, __FILE__, line);
  };
  // cudaInitDevice creates the primary context, which is where exclusive-process mode, a busy
  // MPS server or a broken driver first shows; cudaSetDevice then makes it current.
  check(cudaInitDevice(device, 0, 0), "cudaInitDevice(device, 0, 0)", __LINE__);
  check(cudaSetDevice(device), "cudaSetDevice(device)", __LINE__);
}

DeviceInfo open_cuda_device(int index) {
  std::string why;
  const std::vector<DeviceInfo> devices = cuda_devices(why);
  if (devices.empty()) {
    throw DeviceUnavailable(why);
  }
  if (index < 0 || index >= int(devices.size())) {
    throw DeviceUnavailable("no CUDA device " + std::to_string(index) + ": this machine has " +
                            std::to_string(devices.size()) +
                            " (cuda:0 to cuda:" + std::to_string(devices.size() - 1) + ")");
  }
  const DeviceInfo& info = devices[std::size_t(index)];
  // A device that is listed can still refuse work (busy, driver trouble): that is exit 3, so it
  // is told apart here, before the backend's first runtime call would make it an internal error.
  open_device(index, info.id + " (" + info.name + ")");
  return info;
}

} // namespace attn::cuda
