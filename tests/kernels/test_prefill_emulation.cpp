// kernels/prefill.cuh run on the CPU against the reference, through cuda_emulator.h: the kernel's
// tile map, key ranges, boundary masks, online softmax and (for fp16/bf16) its mma.sync fragment
// packing, which the emulated m16n8k16 reads back in the PTX ISA layout.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "kernels/attn_math.h"
#include "reference/reference.h"
#include "src/model/dtype.h"
#include "src/model/problem.h"
#include "src/model/problem_gen.h"
#include "src/validation/check.h"
#include "tests/support/problems.h"
#include "tests/support/specials.h"

#ifdef ATTN_HAVE_CUDA
#include "src/backends/cuda/prefill_launch.h"
#include "tests/kernels/cuda_emulator.h"

// ---- The configurations under test, one namespace each -----------------------------------------
// 1: fp16, d=64, 32-key tiles, double buffered, 4 warps.
#define DTYPE 1
#define HEAD_DIM 64
#define BLOCK_SIZE 16
#define BLOCK_M 64
#define BLOCK_N 32
#define WARPS 4
#define STAGES 2
namespace pcfg1 {
#include "kernels/prefill.cuh"
}
#undef DTYPE
#undef HEAD_DIM
#undef BLOCK_SIZE
#undef BLOCK_M
#undef BLOCK_N
#undef WARPS
#undef STAGES

// 2: bf16, d=80 (five 16-dim k-steps), 8-token pages, 16-key tiles, one stage.
#define DTYPE 2
#define HEAD_DIM 80
#define BLOCK_SIZE 8
#define BLOCK_M 64
#define BLOCK_N 16
#define WARPS 4
#define STAGES 1
namespace pcfg2 {
#include "kernels/prefill.cuh"
}
#undef DTYPE
#undef HEAD_DIM
#undef BLOCK_SIZE
#undef BLOCK_M
#undef BLOCK_N
#undef WARPS
#undef STAGES

// 3: fp32 (CUDA-core engine), d=64, 24-token pages (not a power of two), double buffered.
#define DTYPE 0
#define HEAD_DIM 64
#define BLOCK_SIZE 24
#define BLOCK_M 64
#define BLOCK_N 32
#define WARPS 4
#define STAGES 2
namespace pcfg3 {
#include "kernels/prefill.cuh"
}
#undef DTYPE
#undef HEAD_DIM
#undef BLOCK_SIZE
#undef BLOCK_M
#undef BLOCK_N
#undef WARPS
#undef STAGES

// 4: bf16, d=128, 128-row tiles over 8 warps, 64-key tiles, double buffered.
#define DTYPE 2
#define HEAD_DIM 128
#define BLOCK_SIZE 32
#define BLOCK_M 128
#define BLOCK_N 64
#define WARPS 8
#define STAGES 2
namespace pcfg4 {
#include "kernels/prefill.cuh"
}
#undef DTYPE
#undef HEAD_DIM
#undef BLOCK_SIZE
#undef BLOCK_M
#undef BLOCK_N
#undef WARPS
#undef STAGES

// 5: fp16 over an fp8_e4m3 cache (tiles converted on their way to shared memory), d=64,
// double buffered. (kernel_common.cuh defined KV_DTYPE 0 for the configurations above.)
#undef KV_DTYPE
#define DTYPE 1
#define KV_DTYPE 1
#define HEAD_DIM 64
#define BLOCK_SIZE 16
#define BLOCK_M 64
#define BLOCK_N 32
#define WARPS 4
#define STAGES 2
namespace pcfg5 {
#include "kernels/prefill.cuh"
}
#undef DTYPE
#undef KV_DTYPE
#undef HEAD_DIM
#undef BLOCK_SIZE
#undef BLOCK_M
#undef BLOCK_N
#undef WARPS
#undef STAGES

// 6: bf16 over an fp8_e5m2 cache, d=80, 8-token pages, one stage.
#define DTYPE 2
#define KV_DTYPE 2
#define HEAD_DIM 80
#define BLOCK_SIZE 8
#define BLOCK_M 64
#define BLOCK_N 16
#define WARPS 4
#define STAGES 1
namespace pcfg6 {
#include "kernels/prefill.cuh"
}
#undef DTYPE
#undef KV_DTYPE
#undef HEAD_DIM
#undef BLOCK_SIZE
#undef BLOCK_M
#undef BLOCK_N
#undef WARPS
#undef STAGES

// 7: fp32 over an fp8_e4m3 cache (4 bytes per 16-byte chunk), odd page size, double buffered.
#define DTYPE 0
#define KV_DTYPE 1
#define HEAD_DIM 64
#define BLOCK_SIZE 24
#define BLOCK_M 64
#define BLOCK_N 32
#define WARPS 4
#define STAGES 2
namespace pcfg7 {
#include "kernels/prefill.cuh"
}

using namespace attn;

namespace {

struct Case {
  DType dtype;
  int head_dim, block_size, q_tile, k_tile, warps, stages;
  std::optional<DType> kv{}; // an fp8 cache: per-tensor and per-head scales far from 1
};

// Mask variant m: 0 causal, 1 causal sliding window, 2 softcap with a custom scale, 3 window
// left and right without causal, 4 full (no mask).
AttnParams make_params(const Case& c, int m) {
  AttnParams p;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = c.head_dim;
  p.block_size = c.block_size;
  p.dtype = c.dtype;
  p.kv_dtype = c.kv;
  switch (m) {
  case 1:
    p.window_left = 21;
    break;
  case 2:
    p.softcap = 5.0;
    p.scale = 0.7;
    break;
  case 3:
    p.causal = false;
    p.window_left = 40;
    p.window_right = 3;
    break;
  case 4:
    p.causal = false;
    break;
  default:
    break;
  }
  return p;
}

template <typename E> const E* in(const HostTensor& t) {
  return reinterpret_cast<const E*>(t.raw());
}

// Launches a prefill entry point over the problem exactly as the CUDA backend does; C is the
// cache's element type (E, or unsigned char for fp8).
template <typename E, typename C = E, typename Kernel>
RunOutput run_prefill(Kernel kernel, const Problem& pr, const cuda::PrefillVariant& v) {
  const AttnParams& p = pr.params;
  const cuda::PrefillLaunch l = cuda::prefill_launch(v, pr);
  RunOutput o;
  o.out = HostTensor(p.dtype, {pr.num_rows(), p.num_heads, p.head_dim});
  poison(o.out);
  o.lse.assign(std::size_t(pr.num_rows()) * p.num_heads, 0.0f);
  poison(o.lse);
  E* out = reinterpret_cast<E*>(o.out.raw());
  const std::vector<float> ks = pr.kernel_key_scales(), vs = pr.kernel_value_scales();
  emu::launch({l.grid.x, l.grid.y, l.grid.z}, int(l.block.x), std::size_t(l.smem / 4) + 4, [&] {
    kernel(out, o.lse.data(), in<E>(pr.query), in<C>(pr.key_cache), in<C>(pr.value_cache),
           pr.block_tables.data(), pr.cu_seqlens_q.data(), pr.cu_seqlens_k.data(),
           l.tile_map.data(), p.num_heads, p.num_kv_heads, pr.max_blocks_per_seq,
           float(p.effective_scale()), float(p.softcap), p.causal ? 1 : 0, p.window_left,
           p.window_right, ks.empty() ? nullptr : ks.data(), vs.empty() ? nullptr : vs.data(),
           pr.num_kv_scales());
  });
  return o;
}

// Every mask variant on a varlen batch: a square prompt spanning two q tiles, a chunked prefill
// (5 new rows over 100 keys), a single row, more query rows than keys (rows that see nothing
// under causal), an empty cache, and lengths at page edges.
template <typename Run> void check_case(const Case& c, Run run, uint64_t seed) {
  const std::vector<int> q_lens = {c.q_tile + 6, 5, 1, 33, 4, c.block_size + 1};
  const std::vector<int> k_lens = {c.q_tile + 6, 100, 17, 20, 0, 2 * c.block_size - 1};
  for (int m = 0; m < 5; ++m) {
    const AttnParams p = make_params(c, m);
    GenOptions g;
    g.seed = seed * 10 + m;
    if (c.kv) {
      // Scales far from 1, per tensor and per KV head in turn, and the formats' NaN patterns in
      // the slots nobody reads.
      g.k_scale = m % 2 == 0 ? std::vector<float>{1.0f / 64} : std::vector<float>{24.0f, 0.37f};
      g.v_scale = m % 2 == 0 ? std::vector<float>{4.0f} : std::vector<float>{0.37f, 1.0f / 64};
      g.nan_tails = true;
    }
    const Problem pr = make_prefill_problem(p, q_lens, k_lens, g);
    KernelConfig cfg{
        Family::prefill,
        {{"q_tile", c.q_tile}, {"k_tile", c.k_tile}, {"warps", c.warps}, {"stages", c.stages}}};
    const cuda::PrefillVariant v = cuda::prefill_variant(cfg, p);
    const ReferenceResult ref = reference_attention(pr);
    const RunOutput o = run(pr, v);
    const CheckReport rep = check_output(o.out, &o.lse, ref, tolerance_for(p.dtype));
    EXPECT_TRUE(rep.pass) << "seed " << g.seed << " mask variant " << m << " " << pr.describe()
                          << "\n"
                          << rep.summary() << "\n"
                          << rep.details();
  }
}

// A NaN or an infinity in V at a key that only some rows of a boundary tile see reaches only
// the rows that see it: their probability for it is 0, and 0 * NaN is NaN (in an mma as in an
// FMA). KV head 1, dimension 5: a NaN at key 40 of a 100-row prompt (rows 0..39 do not see it),
// an infinity at key 98 of a 3-row chunk over 100 keys (its first row, at 97, does not).
template <typename Run> void check_special_values(const Case& c, Run run) {
  const AttnParams p = make_params(c, 0);
  GenOptions g;
  g.seed = 12;
  if (c.kv) {
    test::far_fp8_scales(g, false, p.num_kv_heads);
  }
  const Problem pr = test::prefill_with_specials(p, g);
  KernelConfig cfg{
      Family::prefill,
      {{"q_tile", c.q_tile}, {"k_tile", c.k_tile}, {"warps", c.warps}, {"stages", c.stages}}};
  const ReferenceResult ref = reference_attention(pr);
  const int specials = test::specials_matching(ref, run(pr, cuda::prefill_variant(cfg, p)),
                                               tolerance_for(p.dtype), pr.describe());
  // Dimension 5 of KV head 1's two query heads: the prompt's rows 40..99, the chunk's two rows
  // that see key 98.
  EXPECT_EQ(specials, 2 * test::kPrefillSpecialRows) << pr.describe();
}

} // namespace

TEST(CudaPrefillEmulation, Fp16TensorCoresDoubleBuffered) {
  check_case(
      {DType::f16, 64, 16, 64, 32, 4, 2},
      [](const Problem& pr, const cuda::PrefillVariant& v) {
        return run_prefill<uint16_t>(pcfg1::prefill, pr, v);
      },
      101);
}

TEST(CudaPrefillEmulation, Bf16Dim80SmallPagesOneStage) {
  check_case(
      {DType::bf16, 80, 8, 64, 16, 4, 1},
      [](const Problem& pr, const cuda::PrefillVariant& v) {
        return run_prefill<uint16_t>(pcfg2::prefill, pr, v);
      },
      201);
}

TEST(CudaPrefillEmulation, Fp32CudaCoresOddPageSize) {
  check_case(
      {DType::f32, 64, 24, 64, 32, 4, 2},
      [](const Problem& pr, const cuda::PrefillVariant& v) {
        return run_prefill<float>(pcfg3::prefill, pr, v);
      },
      301);
}

TEST(CudaPrefillEmulation, Bf16Dim128EightWarps) {
  check_case(
      {DType::bf16, 128, 32, 128, 64, 8, 2},
      [](const Problem& pr, const cuda::PrefillVariant& v) {
        return run_prefill<uint16_t>(pcfg4::prefill, pr, v);
      },
      401);
}

TEST(CudaPrefillEmulation, Fp16OverE4m3DoubleBuffered) {
  check_case(
      {DType::f16, 64, 16, 64, 32, 4, 2, DType::fp8_e4m3},
      [](const Problem& pr, const cuda::PrefillVariant& v) {
        return run_prefill<uint16_t, uint8_t>(pcfg5::prefill, pr, v);
      },
      501);
}

TEST(CudaPrefillEmulation, Bf16OverE5m2Dim80OneStage) {
  check_case(
      {DType::bf16, 80, 8, 64, 16, 4, 1, DType::fp8_e5m2},
      [](const Problem& pr, const cuda::PrefillVariant& v) {
        return run_prefill<uint16_t, uint8_t>(pcfg6::prefill, pr, v);
      },
      601);
}

TEST(CudaPrefillEmulation, Fp32OverE4m3OddPageSize) {
  check_case(
      {DType::f32, 64, 24, 64, 32, 4, 2, DType::fp8_e4m3},
      [](const Problem& pr, const cuda::PrefillVariant& v) {
        return run_prefill<float, uint8_t>(pcfg7::prefill, pr, v);
      },
      701);
}
TEST(CudaPrefillEmulation, SpecialValuesReachOnlyTheRowsThatSeeThem) {
  check_special_values({DType::f16, 64, 16, 64, 32, 4, 2}, [](const Problem& pr, const auto& v) {
    return run_prefill<uint16_t>(pcfg1::prefill, pr, v);
  });
  check_special_values({DType::bf16, 80, 8, 64, 16, 4, 1}, [](const Problem& pr, const auto& v) {
    return run_prefill<uint16_t>(pcfg2::prefill, pr, v);
  });
  check_special_values({DType::f32, 64, 24, 64, 32, 4, 2}, [](const Problem& pr, const auto& v) {
    return run_prefill<float>(pcfg3::prefill, pr, v);
  });
  check_special_values({DType::f16, 64, 16, 64, 32, 4, 2, DType::fp8_e4m3},
                       [](const Problem& pr, const auto& v) {
                         return run_prefill<uint16_t, uint8_t>(pcfg5::prefill, pr, v);
                       });
  check_special_values({DType::bf16, 80, 8, 64, 16, 4, 1, DType::fp8_e5m2},
                       [](const Problem& pr, const auto& v) {
                         return run_prefill<uint16_t, uint8_t>(pcfg6::prefill, pr, v);
                       });
}
#else
TEST(CudaPrefillEmulation, NeedsTheCudaBackend) {
  GTEST_SKIP() << "built without the CUDA backend";
}
#endif
