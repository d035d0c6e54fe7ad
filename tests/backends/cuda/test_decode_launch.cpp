// Host-side rules of the CUDA decode kernels, checked without a GPU: configuration space,
// can_run reasons, NVRTC defines, launch shapes, target architecture, the no-GPU error.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/attn_math.h"

#ifdef ATTN_HAVE_CUDA
#include <algorithm>

#include "src/backends/cuda/cuda_backend.h"
#include "src/backends/cuda/cuda_devices.h"
#include "src/backends/cuda/decode_launch.h"
#include "src/model/errors.h"
#include "src/model/problem_gen.h"

using namespace attn;
using namespace attn::cuda;

namespace {

AttnParams gqa_params(int heads, int kv_heads, int head_dim = 128, int block_size = 16,
                      DType dt = DType::f16) {
  AttnParams p;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.block_size = block_size;
  p.dtype = dt;
  return p;
}

Problem small_problem(const AttnParams& p, std::vector<int> lens) {
  GenOptions g;
  g.seed = 7;
  return make_decode_problem(p, lens, g);
}

std::string reason(const KernelConfig& c, const Problem& pr, const CudaLimits& lim = {}) {
  return decode_static_can_run(c, pr, lim).value_or("");
}

} // namespace

TEST(CudaDecodeLaunch, ConfigSpaceRunsOnTypicalProblems) {
  const AttnParams p = gqa_params(32, 8);
  const Problem pr = small_problem(p, {1, 17, 600});
  const auto v1 = decode_config_space(Family::decode_v1, p);
  const auto v2 = decode_config_space(Family::decode_v2, p);
  EXPECT_EQ(v1.size(), 3u * 2u * 2u); // threads x vec x split
  EXPECT_EQ(v2.size(), 3u * 3u * 2u * 2u);
  for (const auto& c : v1) {
    EXPECT_EQ(decode_static_can_run(c, pr, {}), std::nullopt) << c.key();
  }
  std::vector<int> partitions;
  for (const auto& c : v2) {
    EXPECT_EQ(decode_static_can_run(c, pr, {}), std::nullopt) << c.key();
    partitions.push_back(c.get("partition", 0));
  }
  for (int part : {256, 512, 1024}) {
    EXPECT_NE(std::find(partitions.begin(), partitions.end(), part), partitions.end()) << part;
  }
  EXPECT_TRUE(decode_config_space(Family::prefill, p).empty());
}

TEST(CudaDecodeLaunch, SplitPerKvHeadOnlyForSmallGroups) {
  auto splits = [](const AttnParams& p) {
    std::vector<int> s;
    for (const auto& c : decode_config_space(Family::decode_v1, p)) {
      s.push_back(c.get("split", -1));
    }
    return s;
  };
  const auto mha = splits(gqa_params(8, 8));
  EXPECT_EQ(std::count(mha.begin(), mha.end(), 1), 0); // group 1: split=1 would be the same
  const auto gqa = splits(gqa_params(32, 4));
  EXPECT_GT(std::count(gqa.begin(), gqa.end(), 1), 0);
  const auto wide = splits(gqa_params(64, 4)); // 16 heads per KV head
  EXPECT_EQ(std::count(wide.begin(), wide.end(), 1), 0);
}

TEST(CudaDecodeLaunch, CanRunNamesTheReason) {
  const Problem pr = small_problem(gqa_params(16, 1), {5, 40});
  const KernelConfig ok{Family::decode_v1, {}};
  EXPECT_EQ(reason(ok, pr), "");
  EXPECT_NE(reason({Family::decode_v1, {{"threads", 96}}}, pr).find("threads=96"),
            std::string::npos);
  EXPECT_NE(reason({Family::decode_v1, {{"vec", 16}}}, pr).find("vec=16"), std::string::npos);
  EXPECT_NE(reason({Family::decode_v1, {{"vec", 3}}}, pr).find("power of two"), std::string::npos);
  EXPECT_NE(reason({Family::decode_v1, {{"split", 1}}}, pr).find("at most 8"), std::string::npos);
  EXPECT_NE(reason({Family::decode_v1, {{"split", 2}}}, pr).find("split=2"), std::string::npos);
  EXPECT_NE(reason({Family::decode_v1, {{"tile", 2}}}, pr).find("unknown parameter 'tile'"),
            std::string::npos);
  // partition is a decode_v2 parameter only
  EXPECT_NE(reason({Family::decode_v1, {{"partition", 512}}}, pr).find("unknown parameter"),
            std::string::npos);
  EXPECT_NE(reason({Family::decode_v2, {{"partition", 100}}}, pr).find("partition=100"),
            std::string::npos);
  EXPECT_NE(reason({Family::prefill, {}}, pr).find("no prefill kernel"), std::string::npos);

  const Problem odd_dim = small_problem(gqa_params(4, 4, 72), {3});
  EXPECT_NE(reason(ok, odd_dim).find("head_dim 72"), std::string::npos);
  const Problem odd_bs = small_problem(gqa_params(4, 4, 64, 4), {3});
  EXPECT_NE(reason(ok, odd_bs).find("block_size 4"), std::string::npos);
  const Problem f32 = small_problem(gqa_params(4, 4, 64, 16, DType::f32), {3});
  EXPECT_NE(reason({Family::decode_v1, {{"vec", 8}}}, f32).find("up to 4"), std::string::npos);
  EXPECT_EQ(reason({Family::decode_v1, {{"vec", 4}}}, f32), "");
  EXPECT_EQ(reason({Family::decode_v1, {{"vec", 4}}}, small_problem(gqa_params(4, 4, 80), {3})),
            ""); // 80 = 20 * 4
}

TEST(CudaDecodeLaunch, CanRunChecksDeviceLimits) {
  const Problem pr = small_problem(gqa_params(4, 4, 256), {3000, 20});
  CudaLimits tiny;
  tiny.smem_per_block = 4096; // 256 threads: 8 warps * 258 floats = 8256 bytes
  EXPECT_NE(reason({Family::decode_v1, {{"threads", 256}}}, pr, tiny).find("shared memory"),
            std::string::npos);
  EXPECT_EQ(reason({Family::decode_v1, {{"threads", 64}}}, pr, tiny), "");
  CudaLimits small_grid;
  small_grid.max_grid_y = 1;
  EXPECT_NE(reason({Family::decode_v1, {}}, pr, small_grid).find("batch 2"), std::string::npos);
  CudaLimits small_z;
  small_z.max_grid_z = 4;
  EXPECT_NE(reason({Family::decode_v2, {{"partition", 256}}}, pr, small_z).find("12 partitions"),
            std::string::npos);
  EXPECT_EQ(reason({Family::decode_v2, {{"partition", 1024}}}, pr, small_z), "");
  CudaLimits few_threads;
  few_threads.max_threads_per_block = 128;
  EXPECT_NE(reason({Family::decode_v1, {{"threads", 256}}}, pr, few_threads).find("exceeds"),
            std::string::npos);
}

TEST(CudaDecodeLaunch, LaunchShapes) {
  const AttnParams p = gqa_params(32, 8, 128, 16);
  const Problem pr = small_problem(p, {1, 1025, 300});
  const DecodeVariant v1 = decode_variant({Family::decode_v1, {{"threads", 256}}}, p);
  const DecodeLaunch l1 = decode_launch(v1, pr);
  EXPECT_EQ(l1.grid, (Dim3{32, 3, 1}));
  EXPECT_EQ(l1.block, (Dim3{256, 1, 1}));
  EXPECT_EQ(l1.static_smem, 8 * (128 + 2) * 4);
  EXPECT_FALSE(l1.reduce);
  EXPECT_EQ(l1.workspace_floats, 0);

  const DecodeVariant g1 = decode_variant({Family::decode_v1, {{"split", 1}}}, p);
  EXPECT_EQ(g1.gqa, 4);
  EXPECT_EQ(decode_launch(g1, pr).grid, (Dim3{8, 3, 1})); // a CTA per KV head

  const DecodeVariant v2 =
      decode_variant({Family::decode_v2, {{"partition", 512}, {"threads", 64}}}, p);
  const DecodeLaunch l2 = decode_launch(v2, pr);
  EXPECT_EQ(l2.max_parts, 3); // ceil(1025 / 512)
  EXPECT_EQ(l2.grid, (Dim3{32, 3, 3}));
  EXPECT_TRUE(l2.reduce);
  EXPECT_EQ(l2.reduce_grid, (Dim3{32, 3, 1}));
  EXPECT_EQ(l2.reduce_block, (Dim3{unsigned(kReduceThreads), 1, 1}));
  EXPECT_EQ(l2.reduce_smem, 16); // 3 floats, in whole 16-byte groups (the reduce reads 4 at once)
  EXPECT_EQ(l2.workspace_floats, int64_t(3) * 32 * 3 * (128 + 2));

  // Every sequence empty: still one partition slot, so the grid is valid.
  const Problem empty = small_problem(p, {0, 0});
  EXPECT_EQ(decode_launch(v2, empty).max_parts, 1);
}

TEST(CudaDecodeLaunch, DefinesDescribeTheVariant) {
  const AttnParams p = gqa_params(16, 2, 96, 32, DType::bf16);
  const DecodeVariant v =
      decode_variant({Family::decode_v2, {{"partition", 256}, {"split", 1}, {"vec", 4}}}, p);
  const auto d = v.defines();
  for (const std::string want :
       {"-DDTYPE=2", "-DHEAD_DIM=96", "-DBLOCK_SIZE=32", "-DTHREADS=128", "-DVEC=4", "-DGROUP=1",
        "-DGQA=8", "-DPARTITION=256", "-std=c++17"}) {
    EXPECT_NE(std::find(d.begin(), d.end(), want), d.end()) << want;
  }
  EXPECT_EQ(v.describe(),
            "decode_v2 bf16 d=96 bs=32 threads=128 vec=4 group=1 gqa=8 partition=256");
  const DecodeVariant v1 = decode_variant({Family::decode_v1, {}}, p);
  EXPECT_EQ(v1.vec, 8); // widest 16-byte load by default
  const auto d1 = v1.defines();
  EXPECT_NE(std::find(d1.begin(), d1.end(), "-DPARTITION=0"), d1.end());
  EXPECT_NE(std::find(d1.begin(), d1.end(), "-DGQA=1"), d1.end());
}

TEST(CudaDecodeLaunch, TargetArchitecture) {
  const std::vector<int> archs = {75, 80, 86, 87, 89, 90, 100, 120};
  EXPECT_EQ(pick_target_arch(90, archs).arch, 90);
  EXPECT_TRUE(pick_target_arch(90, archs).cubin);
  const TargetArch newer = pick_target_arch(121, archs); // a GPU newer than this NVRTC
  EXPECT_EQ(newer.arch, 120);
  EXPECT_FALSE(newer.cubin);
  EXPECT_THROW((void)pick_target_arch(70, archs), DeviceUnavailable);
  const auto real = nvrtc_supported_archs();
  ASSERT_FALSE(real.empty());
  EXPECT_NE(std::find(real.begin(), real.end(), 80), real.end());
  EXPECT_NE(std::find(real.begin(), real.end(), 90), real.end());
}

TEST(CudaDecodeLaunch, NoGpuGivesOneLineReason) {
  std::string why;
  if (!cuda_devices(why).empty()) {
    GTEST_SKIP() << "this machine has a GPU";
  }
  try {
    (void)make_cuda_backend(0);
    FAIL() << "make_cuda_backend succeeded without a GPU";
  } catch (const DeviceUnavailable& e) {
    const std::string msg = e.what();
    EXPECT_FALSE(msg.empty());
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(msg, why);
  }
}
#endif

// attn_math::combine_scale (added for the in-CTA merge): merging two running states equals the
// state of the concatenated scores.
TEST(CudaDecodeLaunch, CombineScaleMergesRunningStates) {
  const float s1[] = {0.5f, -1.0f, 2.0f};
  const float s2[] = {3.0f, 0.25f};
  auto state = [](const float* s, int n) {
    attn_math::OnlineSoftmax st = attn_math::OnlineSoftmax::empty();
    float mx = attn_math::neg_inf();
    for (int i = 0; i < n; ++i) {
      mx = std::max(mx, s[i]);
    }
    st.update(mx);
    for (int i = 0; i < n; ++i) {
      st.add(st.weight(s[i]));
    }
    return st;
  };
  const auto a = state(s1, 3);
  const auto b = state(s2, 2);
  const float m = std::max(a.m, b.m);
  const float l =
      a.l * attn_math::combine_scale(a.m, a.l, m) + b.l * attn_math::combine_scale(b.m, b.l, m);
  double want = 0.0;
  for (float s : {0.5f, -1.0f, 2.0f, 3.0f, 0.25f}) {
    want += std::exp(double(s) - 3.0);
  }
  EXPECT_FLOAT_EQ(m, 3.0f);
  EXPECT_NEAR(l, want, 1e-6);
  const auto empty = attn_math::OnlineSoftmax::empty();
  EXPECT_EQ(attn_math::combine_scale(empty.m, empty.l, m), 0.0f);
  EXPECT_EQ(attn_math::combine_scale(empty.m, empty.l, attn_math::neg_inf()), 0.0f);
}
