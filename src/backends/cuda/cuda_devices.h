// GPU discovery through the CUDA runtime (statically linked, so a machine without a driver
// still runs the binary and gets a reason instead of a crash).
#pragma once
#include <string>
#include <vector>

#include "src/backends/backend.h"

namespace attn {

// The CUDA devices present; when there are none, `why_none` says why (no driver, no device,
// built without CUDA) in one line.
[[nodiscard]] std::vector<DeviceInfo> cuda_devices(std::string& why_none);

} // namespace attn
