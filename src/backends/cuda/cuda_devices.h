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

// Why the runtime reported cudaErrorInsufficientDriver, from the driver's CUDA version (0: no
// driver loaded) and the version of the runtime linked in (both as 1000 * major + 10 * minor):
// no driver at all, or a driver older than this binary's runtime needs.
[[nodiscard]] std::string insufficient_driver_reason(int driver_version, int runtime_version);

} // namespace attn
