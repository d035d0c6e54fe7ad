// Error checking of CUDA runtime calls: a failed call throws with the call's text, the error's
// name and message, and the file and line, so a report points at the exact call. A sticky error
// (the context is lost until the process ends) throws DeviceFault, which ends the worker process.
#pragma once
#include <stdexcept>
#include <string>

#include <cuda_runtime_api.h>

#include "src/model/errors.h"

namespace attn::cuda {

// Errors after which, in the words of the CUDA runtime's documentation, "the process must be
// terminated and relaunched" to use CUDA again: every later call in this process fails too.
[[nodiscard]] constexpr bool cuda_error_is_sticky(cudaError_t err) {
  switch (err) {
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchFailure:
  case cudaErrorMisalignedAddress:
  case cudaErrorIllegalInstruction:
  case cudaErrorHardwareStackError:
  case cudaErrorAssert:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
  case cudaErrorLaunchTimeout:
  case cudaErrorECCUncorrectable:
  case cudaErrorContained:
  case cudaErrorTensorMemoryLeak:
  case cudaErrorMpsClientTerminated:
  case cudaErrorExternalDevice:
    return true;
  default:
    return false;
  }
}

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* call, const char* file,
                                          int line) {
  const std::string what = std::string(call) + " failed: " + cudaGetErrorName(err) + ": " +
                           cudaGetErrorString(err) + " (" + file + ":" + std::to_string(line) + ")";
  if (cuda_error_is_sticky(err)) {
    throw DeviceFault("CUDA error " + std::string(cudaGetErrorName(err)) +
                      " (sticky: the worker process restarts): " + what);
  }
  throw std::runtime_error(what);
}

} // namespace attn::cuda

#define ATTN_CUDA_CHECK(call)                                                                      \
  do {                                                                                             \
    const cudaError_t attn_cuda_err = (call);                                                      \
    if (attn_cuda_err != cudaSuccess) {                                                            \
      ::attn::cuda::throw_cuda_error(attn_cuda_err, #call, __FILE__, __LINE__);                    \
    }                                                                                              \
  } while (0)
