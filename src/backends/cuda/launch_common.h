// What the host-side rules of both CUDA kernel families share: the device limits they check,
// launch dimensions, the defines every kernel file reads, and the wording of common refusals.
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "src/backends/backend.h"
#include "src/model/dtype.h"

namespace attn::cuda {

// What the device allows a launch. The defaults are an H100's (sm_90); the limits that decode
// checks (static shared memory, threads, registers, grid y and z) are those of every GPU since
// sm_70.
struct CudaLimits {
  int cc = 90;                        // compute capability, major*10 + minor
  int64_t smem_per_block = 48 * 1024; // static shared memory ceiling
  int64_t smem_optin = 227 * 1024;    // dynamic shared memory per block, opted in
  int max_threads_per_block = 1024;
  int regs_per_block = 65536;
  int64_t max_grid_x = 2147483647;
  int max_grid_y = 65535;
  int max_grid_z = 65535;
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  bool operator==(const Dim3&) const = default;
};

// DTYPE of the kernel files: 0 fp32, 1 fp16, 2 bf16.
[[nodiscard]] int kernel_dtype_code(DType t);
// KV_DTYPE of the kernel files: 0 for a cache of the query dtype, 1 fp8_e4m3, 2 fp8_e5m2.
[[nodiscard]] int kernel_kv_dtype_code(std::optional<DType> kv);

// The NVRTC options every kernel file takes, in this order: -std=c++17, DTYPE, HEAD_DIM,
// BLOCK_SIZE and, for an fp8 cache only, KV_DTYPE; a family appends its own defines.
[[nodiscard]] std::vector<std::string> common_defines(DType dtype, std::optional<DType> kv,
                                                      int head_dim, int block_size);

// "unknown parameter 'x' for <family> on CUDA" for the first parameter of `cfg` not in `known`.
[[nodiscard]] std::optional<std::string>
unknown_parameter(const KernelConfig& cfg, std::initializer_list<const char*> known);

[[nodiscard]] bool in_list(const auto& list, int v) {
  return std::find(std::begin(list), std::end(list), v) != std::end(list);
}

// "64, 128, 256"
[[nodiscard]] std::string list_string(const auto& list) {
  std::string s;
  for (int v : list) {
    s += (s.empty() ? "" : ", ") + std::to_string(v);
  }
  return s;
}

// "threads=96 is not one of 64, 128, 256" when `value` is not in `list`.
[[nodiscard]] std::optional<std::string> not_one_of(const char* name, int value, const auto& list) {
  if (in_list(list, value)) {
    return std::nullopt;
  }
  return std::string(name) + "=" + std::to_string(value) + " is not one of " + list_string(list);
}

// "head_dim 72 is not compiled (supported: ...)" when `head_dim` is not in `list`.
[[nodiscard]] std::optional<std::string> head_dim_not_compiled(int head_dim, const auto& list) {
  if (in_list(list, head_dim)) {
    return std::nullopt;
  }
  return "head_dim " + std::to_string(head_dim) +
         " is not compiled (supported: " + list_string(list) + ")";
}

} // namespace attn::cuda
