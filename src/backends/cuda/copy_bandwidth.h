// The memory-bandwidth ceiling of a GPU, measured with a device-to-device copy, that the tools and
// GPU tests compare memory-bound kernels with. Not part of the Backend interface: its own unit.
#pragma once
#include <cstdint>

#include "src/backends/timing.h"

namespace attn::cuda {

// Device-to-device copy bandwidth of GPU `device`, counting bytes read plus bytes written,
// timed like a run (flush, held stream, warm-up duration) with events; opt.mode is not used: one
// copy is one call either way.
struct CopyBandwidth {
  int64_t buffer_bytes = 0;
  double bytes_per_s = 0.0; // 2 * buffer_bytes / median time
  TimingResult timing;
};
[[nodiscard]] CopyBandwidth measure_copy_bandwidth(int device, int64_t buffer_bytes,
                                                   const TimingOptions& opt);

} // namespace attn::cuda
