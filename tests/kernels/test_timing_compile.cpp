// NVRTC compilation of kernels/timing.cuh without a GPU: the L2 flush and the stream hold compile
// to SASS for sm_80 and sm_90 as the request the CUDA backend makes, with both entry points, no
// local memory and a register count any block size fits.
#include <gtest/gtest.h>

#ifdef ATTN_HAVE_CUDA
#include <set>
#include <string>

#include "src/backends/cuda/cuda_backend.h"
#include "src/backends/cuda/nvrtc_compiler.h"

using namespace attn::cuda;

TEST(TimingKernels, CompileForSm80AndSm90) {
  const NvrtcCompiler compiler(std::nullopt); // no cache: really compile
  for (int arch : {80, 90}) {
    SCOPED_TRACE(arch);
    const CompileResult r = compiler.compile(timing_helpers_compile_request({arch, true}));
    EXPECT_FALSE(r.image.empty());
    std::set<std::string> names;
    for (const auto& k : r.kernels) {
      names.insert(k.name);
      EXPECT_EQ(k.stack_bytes, 0) << k.name;
      EXPECT_EQ(k.spill_store_bytes, 0) << k.name;
      EXPECT_LE(k.registers, 64) << k.name; // launched with 256 threads: far below any limit
    }
    EXPECT_EQ(names, (std::set<std::string>{kL2FlushEntry, kHoldStreamEntry})) << r.log;
  }
}

TEST(TimingKernels, PtxForANewerDevice) {
  // The PTX fallback (a device newer than NVRTC's SASS targets) also compiles.
  const NvrtcCompiler compiler(std::nullopt);
  const CompileResult r = compiler.compile(timing_helpers_compile_request({90, false}));
  const std::string ptx(r.image.data());
  EXPECT_NE(ptx.find(".entry attn_l2_flush"), std::string::npos);
  EXPECT_NE(ptx.find(".entry attn_hold_stream"), std::string::npos);
  EXPECT_NE(ptx.find("%globaltimer"), std::string::npos);
}
#else
TEST(TimingKernels, NeedsTheCudaBuild) { GTEST_SKIP() << "built without CUDA"; }
#endif
