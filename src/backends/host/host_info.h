// What the host CPU is: model name, hardware threads and last-level cache, for `devices`,
// for table provenance and for sizing the cache flush of host timings (the CPU backend, host
// plugins and Python kernels all run on it).
#pragma once
#include "src/backends/backend.h"

namespace attn {

// `threads` is the worker count the CPU backend will use (0: all hardware threads).
[[nodiscard]] DeviceInfo cpu_device_info(int threads);

} // namespace attn
