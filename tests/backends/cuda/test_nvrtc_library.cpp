// NVRTC loaded at run time: the library loads and answers like the one built against; a missing
// library or one without NVRTC's entry points is a DeviceUnavailable naming what to install.
#include <gtest/gtest.h>

#ifdef ATTN_HAVE_CUDA
#include <string>

#include <cuda_runtime_api.h> // CUDART_VERSION: the toolkit built against

#include "src/backends/cuda/nvrtc_compiler.h"
#include "src/backends/cuda/nvrtc_library.h"
#include "src/model/errors.h"

using namespace attn;
using namespace attn::cuda;

namespace {

std::string load_error(const std::vector<std::string>& candidates) {
  try {
    (void)load_nvrtc(candidates);
  } catch (const DeviceUnavailable& e) {
    return e.what();
  }
  ADD_FAILURE() << "load_nvrtc did not throw DeviceUnavailable";
  return {};
}

TEST(NvrtcLibrary, CandidatesStartWithTheSonameOfTheToolkitBuiltAgainst) {
  const std::vector<std::string> names = nvrtc_library_candidates();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "libnvrtc.so." + std::to_string(CUDART_VERSION / 1000));
  for (std::size_t i = 1; i < names.size(); ++i) {
    EXPECT_EQ(names[i].front(), '/') << "fallbacks are absolute paths: " << names[i];
  }
}

TEST(NvrtcLibrary, LoadsAndReportsTheVersionBuiltAgainst) {
  const NvrtcApi& api = nvrtc();
  EXPECT_FALSE(api.path.empty());
  int major = 0;
  int minor = 0;
  ASSERT_EQ(api.version(&major, &minor), NVRTC_SUCCESS);
  EXPECT_EQ(major, CUDART_VERSION / 1000);
  EXPECT_EQ(nvrtc_version(), std::to_string(major) + "." + std::to_string(minor));
  EXPECT_STREQ(api.get_error_string(NVRTC_ERROR_COMPILATION), "NVRTC_ERROR_COMPILATION");
  // The same table every time: loaded once per process.
  EXPECT_EQ(&nvrtc(), &api);
}

TEST(NvrtcLibrary, MissingLibraryNamesItAndThePackages) {
  const std::string why =
      load_error({"libattn-no-such-nvrtc.so.13", "/nonexistent/libnvrtc.so.13"});
  EXPECT_NE(why.find("libattn-no-such-nvrtc.so.13"), std::string::npos) << why;
  EXPECT_NE(why.find("/nonexistent/libnvrtc.so.13"), std::string::npos) << why;
  EXPECT_NE(why.find("cannot open shared object file"), std::string::npos) << why;
  const std::string major = std::to_string(CUDART_VERSION / 1000);
  const std::string minor = std::to_string(CUDART_VERSION % 1000 / 10);
  EXPECT_NE(why.find("libnvrtc.so." + major), std::string::npos) << why;
  EXPECT_NE(why.find("cuda-nvrtc-" + major + "-" + minor), std::string::npos) << why;
  EXPECT_NE(why.find("pip install nvidia-cuda-nvrtc"), std::string::npos) << why;
  EXPECT_NE(why.find("nvidia/cu" + major + "/lib"), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << "one line: " << why;
}

TEST(NvrtcLibrary, LibraryWithoutTheEntryPointsIsNotTaken) {
  // libm loads but has no nvrtc* symbols: the first one missing is named.
  const std::string why = load_error({"libm.so.6"});
  EXPECT_NE(why.find("libm.so.6 is not a usable NVRTC"), std::string::npos) << why;
  EXPECT_NE(why.find("nvrtcGetErrorString not found"), std::string::npos) << why;
}

TEST(NvrtcLibrary, LaterCandidateIsTriedAfterAFailedOne) {
  std::vector<std::string> names{"libattn-no-such-nvrtc.so.13"};
  for (const auto& n : nvrtc_library_candidates()) {
    names.push_back(n);
  }
  const NvrtcApi api = load_nvrtc(names);
  EXPECT_NE(api.path, "libattn-no-such-nvrtc.so.13");
  EXPECT_NE(api.get_cubin, nullptr);
}

TEST(NvrtcLibrary, NoCandidatesIsAnError) {
  const std::string why = load_error({});
  EXPECT_NE(why.find("no library names to try"), std::string::npos) << why;
}

} // namespace

#else
TEST(NvrtcLibrary, NeedsTheCudaToolkit) {
  GTEST_SKIP() << "built without the CUDA Toolkit: no NVRTC to load";
}
#endif
