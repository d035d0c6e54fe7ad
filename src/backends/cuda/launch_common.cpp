// The defines and refusals both kernel families' host rules share (see launch_common.h); the
// DTYPE codes must agree with the DTYPE switch at the top of each kernel file.
#include "src/backends/cuda/launch_common.h"

namespace attn::cuda {

int kernel_dtype_code(DType t) {
  switch (t) {
  case DType::f16:
    return 1;
  case DType::bf16:
    return 2;
  default:
    return 0;
  }
}

int kernel_kv_dtype_code(std::optional<DType> kv) {
  if (!kv || !is_fp8(*kv)) {
    return 0;
  }
  return *kv == DType::fp8_e4m3 ? 1 : 2;
}

std::vector<std::string> common_defines(DType dtype, std::optional<DType> kv, int head_dim,
                                        int block_size) {
  std::vector<std::string> d = {"-std=c++17", "-DDTYPE=" + std::to_string(kernel_dtype_code(dtype)),
                                "-DHEAD_DIM=" + std::to_string(head_dim),
                                "-DBLOCK_SIZE=" + std::to_string(block_size)};
  if (kernel_kv_dtype_code(kv) != 0) {
    d.push_back("-DKV_DTYPE=" + std::to_string(kernel_kv_dtype_code(kv)));
  }
  return d;
}

std::optional<std::string> unknown_parameter(const KernelConfig& cfg,
                                             std::initializer_list<const char*> known) {
  for (const auto& [name, value] : cfg.params) {
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return name == k; })) {
      return "unknown parameter '" + name + "' for " + family_name(cfg.family) + " on CUDA";
    }
  }
  return std::nullopt;
}

} // namespace attn::cuda
