// NvrtcCompiler without a GPU: the disk cache and its key, compile errors with the log, PTX
// output, the ptxas report parser, the default cache directory and the embedded sources.
#include <gtest/gtest.h>

#ifdef ATTN_HAVE_CUDA
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "src/backends/cuda/cuda_backend.h"
#include "src/backends/cuda/decode_launch.h"
#include "src/backends/cuda/embedded_kernels.h"
#include "src/backends/cuda/nvrtc_compiler.h"
#include "tests/support/files.h"

using namespace attn;
using namespace attn::cuda;

namespace {

// Decode variants make small, quick real requests for the compiler to work on.
AttnParams params_for(DType dt, int head_dim, int block_size, int group) {
  AttnParams p;
  p.num_kv_heads = 4;
  p.num_heads = 4 * group;
  p.head_dim = head_dim;
  p.block_size = block_size;
  p.dtype = dt;
  return p;
}

} // namespace

TEST(NvrtcCompile, CacheHitReturnsTheSameImageAndReport) {
  const auto dir = test::fresh_path("nvrtc_cache");
  const NvrtcCompiler compiler(dir);
  AttnParams p = params_for(DType::f16, 64, 16, 1);
  const DecodeVariant v = decode_variant({Family::decode_v1, {{"threads", 64}}}, p);
  const CompileRequest req = decode_compile_request(v, {80, true});
  const CompileResult first = compiler.compile(req);
  EXPECT_FALSE(first.from_cache);
  const auto file = dir / (NvrtcCompiler::cache_key(req) + ".bin");
  ASSERT_TRUE(std::filesystem::exists(file));
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(e.path().extension(), ".bin") << "temporary file left behind: " << e.path();
  }
  const CompileResult second = compiler.compile(req);
  EXPECT_TRUE(second.from_cache);
  EXPECT_EQ(second.image, first.image);
  ASSERT_EQ(second.kernels.size(), first.kernels.size());
  EXPECT_EQ(second.kernels[0].registers, first.kernels[0].registers);

  // A damaged file is recompiled, not trusted.
  {
    std::ofstream f(file, std::ios::binary | std::ios::trunc);
    f << "attn-tune-nvrtc-cache 1\ngarbage";
  }
  const CompileResult third = compiler.compile(req);
  EXPECT_FALSE(third.from_cache);
  EXPECT_EQ(third.image, first.image);
  EXPECT_TRUE(compiler.compile(req).from_cache);
  std::filesystem::remove_all(dir);
}

TEST(NvrtcCompile, CacheKeyCoversOptionsArchAndSource) {
  AttnParams p = params_for(DType::bf16, 128, 16, 1);
  const DecodeVariant v = decode_variant({Family::decode_v1, {}}, p);
  const CompileRequest base = decode_compile_request(v, {80, true});
  CompileRequest other_arch = base;
  other_arch.arch = 90;
  CompileRequest ptx = base;
  ptx.cubin = false;
  CompileRequest other_opt = base;
  other_opt.options.push_back("-DEXTRA=1");
  CompileRequest other_src = base;
  other_src.source += "\n";
  const std::string k = NvrtcCompiler::cache_key(base);
  EXPECT_EQ(k, NvrtcCompiler::cache_key(base));
  EXPECT_NE(k, NvrtcCompiler::cache_key(other_arch));
  EXPECT_NE(k, NvrtcCompiler::cache_key(ptx));
  EXPECT_NE(k, NvrtcCompiler::cache_key(other_opt));
  EXPECT_NE(k, NvrtcCompiler::cache_key(other_src));
}

TEST(NvrtcCompile, BrokenSourceReportsConfigurationAndLog) {
  const NvrtcCompiler compiler(std::nullopt);
  CompileRequest req;
  req.source_name = "broken.cuh";
  req.source = "#include \"attn_math.h\"\nextern \"C\" __global__ void k(float* x) { x[0] = y; }\n";
  req.headers = embedded_kernel_headers();
  req.arch = 80;
  req.description = "the broken test kernel";
  try {
    (void)compiler.compile(req);
    FAIL() << "a broken source compiled";
  } catch (const CompileError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("the broken test kernel"), std::string::npos) << msg;
    EXPECT_NE(msg.find("sm_80"), std::string::npos) << msg;
    EXPECT_NE(msg.find("broken.cuh(2)"), std::string::npos) << msg; // the log, with the line
    EXPECT_NE(msg.find("\"y\""), std::string::npos) << msg;
  }
}

TEST(NvrtcCompile, PtxForTheDriverToFinish) {
  const NvrtcCompiler compiler(std::nullopt);
  AttnParams p = params_for(DType::f32, 96, 32, 1);
  const DecodeVariant v = decode_variant({Family::decode_v2, {{"partition", 256}}}, p);
  const CompileResult r = compiler.compile(decode_compile_request(v, {80, false}));
  const std::string ptx(r.image.data());
  EXPECT_NE(ptx.find(".entry decode_v2("), std::string::npos);
  EXPECT_NE(ptx.find(".entry decode_v2_reduce("), std::string::npos);
}

TEST(NvrtcCompile, EmbeddedSourcesMatchTheTree) {
  for (const std::string name : {"decode.cuh", "attn_math.h"}) {
    const std::string tree = test::read_file(std::string(ATTN_SOURCE_DIR) + "/kernels/" + name);
    EXPECT_TRUE(embedded_kernel(name) == tree) << name << " differs from the embedded copy";
  }
  EXPECT_THROW((void)embedded_kernel("missing.cuh"), std::runtime_error);
}

TEST(NvrtcCompile, ParsesPtxasReport) {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'decode_v2' for 'sm_90'\n"
      "ptxas info    : Function properties for decode_v2\n"
      "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 77 registers, used 1 barriers, 2624 bytes smem, 400 bytes cmem[0]\n"
      "ptxas info    : Compiling entry function 'decode_v2_reduce' for 'sm_90'\n"
      "ptxas info    : Function properties for decode_v2_reduce\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 32 registers, used 1 barriers, 16 bytes smem\n";
  const auto k = parse_ptxas_report(log);
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0].name, "decode_v2");
  EXPECT_EQ(k[0].registers, 77);
  EXPECT_EQ(k[0].stack_bytes, 8);
  EXPECT_EQ(k[0].spill_store_bytes, 4);
  EXPECT_EQ(k[0].spill_load_bytes, 12);
  EXPECT_EQ(k[0].smem_bytes, 2624);
  EXPECT_EQ(k[1].name, "decode_v2_reduce");
  EXPECT_EQ(k[1].registers, 32);
  EXPECT_EQ(k[1].spill_store_bytes, 0);
}

TEST(NvrtcCompile, DefaultCacheDirFollowsXdg) {
  const char* old_xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old_xdg ? old_xdg : "";
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg-test", 1);
  EXPECT_EQ(default_cache_dir(), std::filesystem::path("/tmp/xdg-test/attn-tune"));
  ::unsetenv("XDG_CACHE_HOME");
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    EXPECT_EQ(default_cache_dir(), std::filesystem::path(home) / ".cache" / "attn-tune");
  }
  if (old_xdg != nullptr) {
    ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  }
}

TEST(NvrtcCompile, DefaultCacheDirFallsBackToTheTempFolder) {
  const char* old_xdg = std::getenv("XDG_CACHE_HOME");
  const char* old_home = std::getenv("HOME");
  const std::string saved_xdg = old_xdg ? old_xdg : "";
  const std::string saved_home = old_home ? old_home : "";
  ::unsetenv("XDG_CACHE_HOME");
  ::unsetenv("HOME");
  EXPECT_EQ(default_cache_dir(),
            std::filesystem::temp_directory_path() / ("attn-tune-" + std::to_string(::getuid())));
  if (old_xdg != nullptr) {
    ::setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
  }
  if (old_home != nullptr) {
    ::setenv("HOME", saved_home.c_str(), 1);
  }
}

#else
TEST(NvrtcCompile, NeedsTheCudaToolkit) {
  GTEST_SKIP() << "built without the CUDA Toolkit: no NVRTC to test";
}
#endif
