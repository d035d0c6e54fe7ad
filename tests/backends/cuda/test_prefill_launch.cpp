// Host rules of the CUDA prefill kernel without a GPU: the configuration space, can_run reasons,
// defines, shared memory, and the launch shape with its q-tile map and skipped key tiles.
#include <gtest/gtest.h>

#ifdef ATTN_HAVE_CUDA
#include <algorithm>
#include <set>

#include "src/backends/cuda/prefill_launch.h"
#include "src/model/problem_gen.h"

using namespace attn;
using namespace attn::cuda;

namespace {

AttnParams params(DType dt, int head_dim, int block_size) {
  AttnParams p;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = head_dim;
  p.block_size = block_size;
  p.dtype = dt;
  return p;
}

KernelConfig config(int q_tile, int k_tile, int warps, int stages) {
  return {Family::prefill,
          {{"q_tile", q_tile}, {"k_tile", k_tile}, {"warps", warps}, {"stages", stages}}};
}

Problem problem(const AttnParams& p, std::vector<int> q, std::vector<int> k) {
  GenOptions g;
  g.seed = 7;
  return make_prefill_problem(p, q, k, g);
}

} // namespace

TEST(CudaPrefillLaunch, ConfigSpaceHasTwoChoicesOfEachParameterAndRunsOnAnH100) {
  const CudaLimits h100; // defaults: sm_90, 227 KiB opt-in shared memory
  for (DType dt : {DType::f16, DType::bf16}) {
    for (int d : kPrefillHeadDims) {
      const AttnParams p = params(dt, d, 16);
      const auto space = prefill_config_space(p);
      std::map<std::string, std::set<int>> seen;
      for (const auto& c : space) {
        EXPECT_EQ(c.family, Family::prefill);
        for (const auto& [k, v] : c.params) {
          seen[k].insert(v);
        }
        const Problem pr = problem(p, {5}, {9});
        EXPECT_EQ(prefill_static_can_run(c, pr, h100), std::nullopt) << c.key() << " d=" << d;
      }
      for (const char* name : {"q_tile", "k_tile", "warps", "stages"}) {
        EXPECT_GE(seen[name].size(), 2u) << name << " d=" << d;
      }
    }
  }
}

TEST(CudaPrefillLaunch, DefaultConfigurationRunsEverySupportedShape) {
  // replay runs the family with no parameters: the defaults must fit every head_dim and dtype.
  const CudaLimits h100;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (int d : kPrefillHeadDims) {
      for (int bs : {8, 16, 24, 256}) {
        const AttnParams p = params(dt, d, bs);
        EXPECT_EQ(prefill_static_can_run({Family::prefill, {}}, problem(p, {3}, {9}), h100),
                  std::nullopt)
            << dtype_name(dt) << " d=" << d << " bs=" << bs;
      }
    }
  }
}

TEST(CudaPrefillLaunch, CanRunNamesTheReason) {
  const CudaLimits lim;
  const AttnParams p = params(DType::bf16, 128, 16);
  const Problem pr = problem(p, {40, 3}, {40, 90});
  auto why = [&](const KernelConfig& c, const Problem& x, const CudaLimits& l) {
    const auto r = prefill_static_can_run(c, x, l);
    return r ? *r : std::string("(runs)");
  };
  EXPECT_NE(why(config(64, 64, 8, 2), pr, lim).find("q_tile must be 128"), std::string::npos);
  EXPECT_NE(why(config(64, 48, 4, 2), pr, lim).find("k_tile=48"), std::string::npos);
  EXPECT_NE(why(config(64, 64, 4, 3), pr, lim).find("stages=3"), std::string::npos);
  KernelConfig odd = config(64, 64, 4, 2);
  odd.params["threads"] = 128;
  EXPECT_NE(why(odd, pr, lim).find("unknown parameter 'threads'"), std::string::npos);

  CudaLimits volta = lim;
  volta.cc = 70;
  EXPECT_NE(why(config(64, 64, 4, 2), pr, volta).find("sm_80"), std::string::npos);

  CudaLimits small = lim;
  small.smem_optin = 48 * 1024; // 64 + 2*2*64 rows of 136 halves = 87 KiB
  EXPECT_NE(why(config(64, 64, 4, 2), pr, small).find("bytes of shared memory"), std::string::npos);
  EXPECT_EQ(why(config(64, 32, 4, 1), pr, small), "(runs)");

  const AttnParams wide = params(DType::f16, 256, 16);
  EXPECT_NE(why(config(64, 64, 4, 2), problem(wide, {4}, {4}), lim).find("registers"),
            std::string::npos);
  AttnParams odd_dim = params(DType::f16, 72, 16);
  EXPECT_NE(why(config(64, 64, 4, 2), problem(odd_dim, {4}, {4}), lim).find("head_dim 72"),
            std::string::npos);
  AttnParams big_pages = params(DType::f16, 64, 512);
  EXPECT_NE(why(config(64, 64, 4, 2), problem(big_pages, {4}, {4}), lim).find("block_size 512"),
            std::string::npos);

  // fp32 tiles are twice as large: the biggest does not fit an H100's 227 KiB.
  const AttnParams f32 = params(DType::f32, 256, 16);
  EXPECT_NE(why(config(128, 32, 8, 2), problem(f32, {4}, {4}), lim).find("shared memory"),
            std::string::npos);

  AttnParams dec = p;
  const Problem decode = make_decode_problem(dec, {5, 6}, GenOptions{});
  EXPECT_NE(why(config(64, 64, 4, 2), decode, lim).find("decode problem"), std::string::npos);
}

TEST(CudaPrefillLaunch, SharedMemoryMatchesTheKernelLayout) {
  PrefillVariant v;
  v.dtype = DType::bf16;
  v.head_dim = 128;
  v.q_tile = 64;
  v.k_tile = 64;
  v.warps = 4;
  v.stages = 2;
  EXPECT_EQ(prefill_smem_bytes(v), (64 + 2 * 2 * 64) * (128 + 8) * 2);
  v.dtype = DType::f32;
  v.stages = 1;
  EXPECT_EQ(prefill_smem_bytes(v), (64 + 2 * 64) * (128 + 4) * 4 + 64 * 64 * 4);
  const std::vector<std::string> want = {"-std=c++17",      "-DDTYPE=0",    "-DHEAD_DIM=128",
                                         "-DBLOCK_SIZE=16", "-DBLOCK_M=64", "-DBLOCK_N=64",
                                         "-DWARPS=4",       "-DSTAGES=1"};
  EXPECT_EQ(v.defines(), want);
}

TEST(CudaPrefillLaunch, TileMapCoversEveryRowOnceHeaviestFirst) {
  const AttnParams p = params(DType::f16, 64, 16);
  const Problem pr = problem(p, {130, 0, 1, 64, 65}, {130, 7, 1000, 64, 300});
  const PrefillVariant v = prefill_variant(config(64, 64, 4, 2), p);
  const PrefillLaunch l = prefill_launch(v, pr);
  // Tiles: 3 + 0 + 1 + 1 + 2.
  ASSERT_EQ(l.grid.x, 7u);
  EXPECT_EQ(l.grid.y, 8u);
  EXPECT_EQ(l.block.x, 128u);
  EXPECT_EQ(l.smem, prefill_smem_bytes(v));
  ASSERT_EQ(l.tile_map.size(), 14u);
  std::set<std::pair<int, int>> tiles;
  for (std::size_t i = 0; i < 7; ++i) {
    tiles.insert({l.tile_map[2 * i], l.tile_map[2 * i + 1]});
  }
  const std::set<std::pair<int, int>> want = {{0, 0}, {0, 64}, {0, 128}, {2, 0},
                                              {3, 0}, {4, 0},  {4, 64}};
  EXPECT_EQ(tiles, want);
  // The single row over 1000 keys (16 key tiles) comes first.
  EXPECT_EQ(l.tile_map[0], 2);
  EXPECT_EQ(l.tile_map[1], 0);
}

TEST(CudaPrefillLaunch, MaskedKeyTilesAreSkipped) {
  AttnParams p = params(DType::bf16, 128, 16);
  const int n = 4096;
  p.causal = false;
  const PrefillVariant v = prefill_variant(config(128, 64, 8, 2), p);
  const int64_t full = prefill_launch(v, problem(p, {n}, {n})).key_tiles;
  EXPECT_EQ(full, (n / 128) * (n / 64));
  p.causal = true;
  const int64_t causal = prefill_launch(v, problem(p, {n}, {n})).key_tiles;
  // Each 128-row tile walks its keys up to the diagonal: about half, plus the diagonal tiles.
  EXPECT_EQ(causal, int64_t(n / 128) * (n / 128 + 1));
  EXPECT_LT(double(causal), 0.52 * double(full));
  p.window_left = 255; // a 256-key sliding window
  const int64_t window = prefill_launch(v, problem(p, {n}, {n})).key_tiles;
  EXPECT_LE(window, int64_t(n / 128) * ((256 + 128) / 64 + 1));
}
#else
TEST(CudaPrefillLaunch, NeedsTheCudaBackend) { GTEST_SKIP() << "built without the CUDA backend"; }
#endif
