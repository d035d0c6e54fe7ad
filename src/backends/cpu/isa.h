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

// How the AVX2 and AVX-512 decode loops turn an E4M3 cache byte into an fp32 (the portable build
// has one way; E5M2 always goes through fp16 bits there, exact for its infinities and NaNs too):
// through fp16 bits and the conversion instruction (never an fp32 subnormal), or by moving the
// byte's bits into an fp32, one operation fewer per vector, which makes fp8 subnormals fp32
// subnormals. Intel cores take a microcode assist on each operation with a subnormal operand
// (E4M3 decode ran 10 times slower on an Intel Xeon); AMD's Zen cores take them at full speed.
enum class Fp8Reads { via_fp16, via_fp32 };
[[nodiscard]] const char* fp8_reads_name(Fp8Reads r);

// The environment variable that forces one: "via-fp16" or "via-fp32"; unset, empty or "auto" is
// via_fp32 on AMD processors and via_fp16 on the others.
inline constexpr const char* kFp8ReadsEnv = "ATTN_TUNE_CPU_FP8_READS";

// The processor's choice, or the one ATTN_TUNE_CPU_FP8_READS names (so that both are tested on
// every machine). Throws InputError for an unknown name.
[[nodiscard]] Fp8Reads selected_fp8_reads();

} // namespace attn::cpu
