// Which CUDA errors end the worker process: the sticky ones, which leave the context unusable,
// throw DeviceFault with the error's name; every other failure stays an ordinary error.
#include <gtest/gtest.h>

#ifdef ATTN_HAVE_CUDA
#include <string>

#include "src/backends/cuda/cuda_check.h"

namespace attn::cuda {
namespace {

TEST(CudaCheck, StickyErrorsAreTheOnesThatNeedANewProcess) {
  for (cudaError_t e : {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorMisalignedAddress,
                        cudaErrorIllegalInstruction, cudaErrorHardwareStackError, cudaErrorAssert,
                        cudaErrorInvalidPc, cudaErrorLaunchTimeout}) {
    EXPECT_TRUE(cuda_error_is_sticky(e)) << cudaGetErrorName(e);
  }
  for (cudaError_t e :
       {cudaErrorMemoryAllocation, cudaErrorInvalidValue, cudaErrorNoDevice,
        cudaErrorInvalidDeviceFunction, cudaErrorLaunchOutOfResources, cudaErrorInsufficientDriver,
        cudaErrorDevicesUnavailable, cudaErrorNotReady}) {
    EXPECT_FALSE(cuda_error_is_sticky(e)) << cudaGetErrorName(e);
  }
}

TEST(CudaCheck, StickyErrorThrowsDeviceFaultNamingTheError) {
  try {
    ATTN_CUDA_CHECK(cudaErrorIllegalAddress);
    FAIL() << "no throw";
  } catch (const DeviceFault& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaErrorIllegalAddress"), std::string::npos) << what;
    EXPECT_NE(what.find("test_cuda_check.cpp"), std::string::npos) << what;
  }
}

TEST(CudaCheck, OrdinaryErrorIsNotAFault) {
  try {
    ATTN_CUDA_CHECK(cudaErrorMemoryAllocation);
    FAIL() << "no throw";
  } catch (const DeviceFault&) {
    FAIL() << "out of memory is not sticky";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cudaErrorMemoryAllocation"), std::string::npos);
  }
}

} // namespace
} // namespace attn::cuda
#endif
