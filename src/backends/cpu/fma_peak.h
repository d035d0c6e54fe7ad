// The processor's measured floating-point peak for one kernel build: what bench_cpu compares the
// prefill kernels' GFLOP/s against, per ISA level, so figures from different machines and levels
// can be read against their own ceiling.
#pragma once

#include "src/backends/cpu/isa.h"

namespace attn::cpu {

// fp32 GFLOP/s of independent fused multiply-adds (multiply plus add for the baseline build,
// which has no FMA) on `threads` threads at once, each running for about `seconds`. Throws
// InputError when this processor cannot run `isa`.
[[nodiscard]] double measured_fma_peak_gflops(Isa isa, int threads, double seconds);

} // namespace attn::cpu
