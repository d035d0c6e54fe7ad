// The instruction-set builds of the CPU kernels and the run-time choice among them: a portable
// binary still runs AVX2 / AVX-512 code where the processor has it.
#pragma once

namespace attn::cpu {

// Instruction-set level the kernels are compiled for; the backend picks the best one the
// processor has at run time.
enum class Isa { base, avx2, avx512 };
[[nodiscard]] const char* isa_name(Isa isa);
[[nodiscard]] bool isa_supported(Isa isa);
[[nodiscard]] Isa best_isa();

} // namespace attn::cpu
