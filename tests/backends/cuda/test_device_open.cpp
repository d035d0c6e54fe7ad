// Which CUDA errors at device opening mean "this device cannot be used here" (exit 3) rather than
// an internal error (exit 4); a pure mapping, tested without a GPU.
#include <gtest/gtest.h>

#ifdef ATTN_HAVE_CUDA
#include <string>

#include "src/backends/cuda/device_open.h"

using namespace attn::cuda;

namespace {

TEST(DeviceOpen, UnusableDeviceErrorsHaveAReasonAndTheErrorName) {
  const struct {
    cudaError_t err;
    const char* words;
  } cases[] = {
      {cudaErrorDevicesUnavailable, "exclusive-process"},
      {cudaErrorNoDevice, "no CUDA device"},
      {cudaErrorInvalidDevice, "no such CUDA device"},
      {cudaErrorInsufficientDriver, "driver is missing or older"},
      {cudaErrorCallRequiresNewerDriver, "driver is older"},
      {cudaErrorSystemDriverMismatch, "different versions"},
      {cudaErrorCompatNotSupportedOnDevice, "forward-compatibility"},
      {cudaErrorSystemNotReady, "nvidia-fabricmanager"},
      {cudaErrorInitializationError, "failed to initialise"},
      {cudaErrorNotPermitted, "not permitted"},
      {cudaErrorDeviceNotLicensed, "licence"},
      {cudaErrorIncompatibleDriverContext, "driver API"},
      {cudaErrorECCUncorrectable, "uncorrectable"},
      {cudaErrorNvlinkUncorrectable, "uncorrectable"},
      {cudaErrorMemoryAllocation, "no memory left"},
      {cudaErrorMpsConnectionFailed, "MPS server"},
      {cudaErrorMpsServerNotReady, "MPS server"},
      {cudaErrorMpsRpcFailure, "MPS server"},
      {cudaErrorMpsMaxClientsReached, "no more clients"},
      {cudaErrorMpsMaxConnectionsReached, "no more clients"},
  };
  for (const auto& c : cases) {
    const auto why = device_unusable_reason(c.err);
    ASSERT_TRUE(why.has_value()) << cudaGetErrorName(c.err);
    EXPECT_NE(why->find(c.words), std::string::npos) << *why;
    EXPECT_NE(why->find(cudaGetErrorName(c.err)), std::string::npos) << *why;
    EXPECT_EQ(why->find('\n'), std::string::npos) << *why;
  }
}

TEST(DeviceOpen, OtherErrorsStayInternal) {
  for (cudaError_t err :
       {cudaSuccess, cudaErrorInvalidValue, cudaErrorLaunchFailure, cudaErrorIllegalAddress,
        cudaErrorInvalidKernelImage, cudaErrorUnknown, cudaErrorInvalidResourceHandle}) {
    EXPECT_FALSE(device_unusable_reason(err).has_value()) << cudaGetErrorName(err);
  }
}

} // namespace

#else
TEST(DeviceOpen, NeedsTheCudaToolkit) {
  GTEST_SKIP() << "built without the CUDA Toolkit: no CUDA errors to map";
}
#endif
