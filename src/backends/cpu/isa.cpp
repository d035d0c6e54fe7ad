// Which kernel build the processor can run.
#include "src/backends/cpu/isa.h"

#include <cstdlib>
#include <string>

#include "src/model/errors.h"

namespace attn::cpu {

const char* isa_name(Isa isa) {
  switch (isa) {
  case Isa::avx2:
    return "x86-64-v3";
  case Isa::avx512:
    return "x86-64-v4";
  default:
    return "baseline";
  }
}

bool isa_supported(Isa isa) {
  if (isa == Isa::base) {
    return true;
  }
#if ATTN_CPU_MULTI_ISA
  __builtin_cpu_init();
  const bool v3 = __builtin_cpu_supports("x86-64-v3");
  const bool v4 = __builtin_cpu_supports("x86-64-v4");
  return isa == Isa::avx2 ? v3 : v4;
#else
  return false;
#endif
}

Isa best_isa() {
  if (isa_supported(Isa::avx512)) {
    return Isa::avx512;
  }
  return isa_supported(Isa::avx2) ? Isa::avx2 : Isa::base;
}

Isa selected_isa() {
  const char* env = std::getenv(kIsaOverrideEnv);
  const std::string want = env != nullptr ? env : "";
  if (want.empty() || want == "native") {
    return best_isa();
  }
  Isa isa;
  if (want == "baseline" || want == "base") {
    isa = Isa::base;
  } else if (want == "x86-64-v3" || want == "avx2") {
    isa = Isa::avx2;
  } else if (want == "x86-64-v4" || want == "avx512") {
    isa = Isa::avx512;
  } else {
    throw InputError(std::string(kIsaOverrideEnv) + "='" + want +
                     "' is not baseline, x86-64-v3 (avx2), x86-64-v4 (avx512) or native");
  }
  if (!isa_supported(isa)) {
    throw InputError(std::string(kIsaOverrideEnv) + "=" + want +
                     ": this processor cannot run the " + isa_name(isa) +
                     " kernels (the best it runs is " + isa_name(best_isa()) + ")");
  }
  return isa;
}

const char* fp8_reads_name(Fp8Reads r) { return r == Fp8Reads::via_fp32 ? "via-fp32" : "via-fp16"; }

Fp8Reads selected_fp8_reads() {
  const char* env = std::getenv(kFp8ReadsEnv);
  const std::string want = env != nullptr ? env : "";
  if (want == "via-fp16") {
    return Fp8Reads::via_fp16;
  }
  if (want == "via-fp32") {
    return Fp8Reads::via_fp32;
  }
  if (!want.empty() && want != "auto") {
    throw InputError(std::string(kFp8ReadsEnv) + "='" + want +
                     "' is not via-fp16, via-fp32 or auto");
  }
#if ATTN_CPU_MULTI_ISA
  __builtin_cpu_init();
  return __builtin_cpu_is("amd") ? Fp8Reads::via_fp32 : Fp8Reads::via_fp16;
#else
  return Fp8Reads::via_fp16;
#endif
}

} // namespace attn::cpu
