// Warming the NVRTC disk cache for a device before a sweep: many variants compiled on all CPU
// cores, so that the backend's own compiles (one at a time, on first use) become cache hits.
#pragma once
#include <vector>

#include "src/backends/cuda/decode_launch.h"
#include "src/backends/cuda/prefill_launch.h"

namespace attn::cuda {

// Compiles `variants` for a device of compute capability `cc` into the disk cache. Returns how
// many failed to compile (can_run reports each with its reason later).
int precompile_decode(const std::vector<DecodeVariant>& variants, int cc);
// The same for prefill variants.
int precompile_prefill(const std::vector<PrefillVariant>& variants, int cc);

} // namespace attn::cuda
