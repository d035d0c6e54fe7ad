// Error checking of CUDA runtime calls: a failed call throws with the call's text, the error's
// name and message, and the file and line, so a report points at the exact call.
#pragma once
#include <stdexcept>
#include <string>

#include <cuda_runtime_api.h>

namespace attn::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* call, const char* file,
                                          int line) {
  throw std::runtime_error(std::string(call) + " failed: " + cudaGetErrorName(err) + ": " +
                           cudaGetErrorString(err) + " (" + file + ":" + std::to_string(line) +
                           ")");
}

} // namespace attn::cuda

#define ATTN_CUDA_CHECK(call)                                                                      \
  do {                                                                                             \
    const cudaError_t attn_cuda_err = (call);                                                      \
    if (attn_cuda_err != cudaSuccess) {                                                            \
      ::attn::cuda::throw_cuda_error(attn_cuda_err, #call, __FILE__, __LINE__);                    \
    }                                                                                              \
  } while (0)
