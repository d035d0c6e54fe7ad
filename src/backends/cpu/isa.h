// The instruction-set builds of the CPU kernels and the run-time choice among them: a portable
// binary still runs AVX2 / AVX-512 code where the processor has it.
#pragma once

// The AVX2 and AVX-512 builds exist where GCC compiles for x86-64: cpu_kernels.cpp compiles its
// loops once per level under `#pragma GCC target`. Elsewhere (another architecture, or Clang, whose
// target pragma works differently) only the portable build is compiled.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ATTN_CPU_MULTI_ISA 1
#else
#define ATTN_CPU_MULTI_ISA 0
#endif

namespace attn::cpu {

// Instruction-set level the kernels are compiled for; the backend picks the best one the
// processor has at run time.
enum class Isa { base, avx2, avx512 };
[[nodiscard]] const char* isa_name(Isa isa);
[[nodiscard]] bool isa_supported(Isa isa);
[[nodiscard]] Isa best_isa();

// The environment variable that forces a kernel build: "baseline", "x86-64-v3" (or "avx2") or
// "x86-64-v4" (or "avx512"); unset, empty or "native" is best_isa().
inline constexpr const char* kIsaOverrideEnv = "ATTN_TUNE_CPU_ISA";

// The build the CPU kernels run: best_isa(), or the one ATTN_TUNE_CPU_ISA names, so that a lower
// level can be tested and timed on a machine that has a higher one (an AVX-512 machine proving
// the AVX2 path). Throws InputError for an unknown name or a level this processor cannot run.
[[nodiscard]] Isa selected_isa();

} // namespace attn::cpu
