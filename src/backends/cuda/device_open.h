// Opening a CUDA device for work (its primary context): the errors that mean this device cannot
// be used here (busy in exclusive mode, no or wrong driver, MPS down) become DeviceUnavailable.
#pragma once
#include <optional>
#include <string>

#include <cuda_runtime_api.h>

#include "src/backends/backend.h"

namespace attn::cuda {

// Why `err`, returned while a device is being opened, means the device cannot be used on this
// machine now (a reason for the user, with the error's name); nullopt when `err` is not such an
// error but a failure of attn-tune or of the CUDA stack, which stays an internal error.
[[nodiscard]] std::optional<std::string> device_unusable_reason(cudaError_t err);

// Makes `device` current and creates its context. Throws DeviceUnavailable naming `label`
// ("cuda:0 (NVIDIA H100)") and the reason when the device cannot be used, else a runtime error.
void open_device(int device, const std::string& label);

// GPU `index` of this machine, listed and opened: what every kernel set on a GPU (the built-in
// kernels, CUDA plugins) does first. Throws DeviceUnavailable when there is no GPU, no such
// index, or the device cannot be used.
[[nodiscard]] DeviceInfo open_cuda_device(int index);

} // namespace attn::cuda
