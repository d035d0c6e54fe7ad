// Filling the NVRTC disk cache before a sweep: many variants compiled on all CPU cores, so that
// the backend's own compiles (one at a time, on first use) become cache hits.
#pragma once
#include <functional>
#include <vector>

#include "src/backends/cuda/decode_launch.h"
#include "src/backends/cuda/nvrtc_compiler.h"
#include "src/backends/cuda/prefill_launch.h"

namespace attn::cuda {

// Compiles `requests` into the default disk cache on all CPU cores, calling `progress(done)`
// after each (one call at a time, `done` rising from 1 to requests.size()). Returns how many
// failed to compile (can_run reports each with its reason later).
int precompile(const std::vector<CompileRequest>& requests,
               const std::function<void(int done)>& progress = {});

// The same for decode variants, for a device of compute capability `cc`.
int precompile_decode(const std::vector<DecodeVariant>& variants, int cc);
// The same for prefill variants.
int precompile_prefill(const std::vector<PrefillVariant>& variants, int cc);

} // namespace attn::cuda
