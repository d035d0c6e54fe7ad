// kernels/decode.cuh run on the CPU against the reference: each CUDA thread is a coroutine, and
// a shuffle or __syncthreads is a CTA-wide barrier (valid for this kernel: every thread meets the
// same barriers in the same order). Checks the kernel's own index math, masks, merges and reduce.
#include <gtest/gtest.h>

#include <ucontext.h>

#include <cstring>
#include <functional>
#include <memory>
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
#include "src/backends/cuda/decode_launch.h"

#include "tests/kernels/cuda_emulator.h"

// ---- The configurations under test, one namespace each -----------------------------------------
// 1: fp16, d=64 (8 chunks: TK=8, 8 subgroups), v1 per query head.
#define DTYPE 1
#define HEAD_DIM 64
#define BLOCK_SIZE 16
#define THREADS 64
#define VEC 8
#define GROUP 0
#define GQA 1
#define PARTITION 0
namespace cfg1 {
#include "kernels/decode.cuh"
}
#undef DTYPE
#undef HEAD_DIM
#undef BLOCK_SIZE
#undef THREADS
#undef VEC
#undef GROUP
#undef GQA
#undef PARTITION

// 2: bf16, d=80 (10 chunks on 16 lanes: partial rows), v1 per KV head with 4 heads.
#define DTYPE 2
#define HEAD_DIM 80
#define BLOCK_SIZE 8
#define THREADS 128
#define VEC 8
#define GROUP 1
#define GQA 4
#define PARTITION 0
namespace cfg2 {
#include "kernels/decode.cuh"
}
#undef DTYPE
#undef HEAD_DIM
#undef BLOCK_SIZE
#undef THREADS
#undef VEC
#undef GROUP
#undef GQA
#undef PARTITION

// 3: fp32, d=96 (24 chunks: TK=32, 8 lanes idle), v2 per query head, 64-token partitions.
#define DTYPE 0
#define HEAD_DIM 96
#define BLOCK_SIZE 32
#define THREADS 64
#define VEC 4
#define GROUP 0
#define GQA 1
#define PARTITION 64
namespace cfg3 {
#include "kernels/decode.cuh"
}
#undef DTYPE
#undef HEAD_DIM
#undef BLOCK_SIZE
#undef THREADS
#undef VEC
#undef GROUP
#undef GQA
#undef PARTITION

// 4: fp16, d=128 with 4-element loads (32 chunks), v2 per KV head with 2 heads, 32-token parts.
#define DTYPE 1
#define HEAD_DIM 128
#define BLOCK_SIZE 16
#define THREADS 128
#define VEC 4
#define GROUP 1
#define GQA 2
#define PARTITION 32
namespace cfg4 {
#include "kernels/decode.cuh"
}
#undef DTYPE
#undef HEAD_DIM
#undef BLOCK_SIZE
#undef THREADS
#undef VEC
#undef GROUP
#undef GQA
#undef PARTITION

// 5: fp32, d=112 (28 chunks of 32 lanes), v2 per KV head with 8 heads (UNROLL 1), bs=64.
#define DTYPE 0
#define HEAD_DIM 112
#define BLOCK_SIZE 64
#define THREADS 64
#define VEC 4
#define GROUP 1
#define GQA 8
#define PARTITION 128
namespace cfg5 {
#include "kernels/decode.cuh"
}
#undef DTYPE
#undef HEAD_DIM
#undef BLOCK_SIZE
#undef THREADS
#undef VEC
#undef GROUP
#undef GQA
#undef PARTITION

// 6: bf16, d=192 with 2-element loads (96 chunks: 3 per lane), v1 per query head.
#define DTYPE 2
#define HEAD_DIM 192
#define BLOCK_SIZE 32
#define THREADS 64
#define VEC 2
#define GROUP 0
#define GQA 1
#define PARTITION 0
namespace cfg6 {
#include "kernels/decode.cuh"
}
#undef DTYPE
#undef HEAD_DIM
#undef BLOCK_SIZE
#undef THREADS
#undef VEC
#undef GROUP
#undef GQA
#undef PARTITION

// 7: fp16 over an fp8_e4m3 cache, d=128 (16 chunks of 8 bytes), v1 per KV head with 4 heads.
// (kernel_common.cuh defined KV_DTYPE 0 for the configurations above.)
#undef KV_DTYPE
#define DTYPE 1
#define KV_DTYPE 1
#define HEAD_DIM 128
#define BLOCK_SIZE 16
#define THREADS 64
#define VEC 8
#define GROUP 1
#define GQA 4
#define PARTITION 0
namespace cfg7 {
#include "kernels/decode.cuh"
}
#undef DTYPE
#undef KV_DTYPE
#undef HEAD_DIM
#undef BLOCK_SIZE
#undef THREADS
#undef VEC
#undef GROUP
#undef GQA
#undef PARTITION

// 8: bf16 over an fp8_e5m2 cache, d=64 with 4-byte loads, v2 per query head, 32-token partitions.
#define DTYPE 2
#define KV_DTYPE 2
#define HEAD_DIM 64
#define BLOCK_SIZE 16
#define THREADS 128
#define VEC 4
#define GROUP 0
#define GQA 1
#define PARTITION 32
namespace cfg8 {
#include "kernels/decode.cuh"
}
#undef DTYPE
#undef KV_DTYPE
#undef HEAD_DIM
#undef BLOCK_SIZE
#undef THREADS
#undef VEC
#undef GROUP
#undef GQA
#undef PARTITION

// 9: fp32 over an fp8_e4m3 cache, d=80 with 2-byte loads (40 chunks: partial rows), v2 per KV
// head with 2 heads, 64-token partitions.
#define DTYPE 0
#define KV_DTYPE 1
#define HEAD_DIM 80
#define BLOCK_SIZE 32
#define THREADS 64
#define VEC 2
#define GROUP 1
#define GQA 2
#define PARTITION 64
namespace cfg9 {
#include "kernels/decode.cuh"
}
#undef DTYPE
#undef KV_DTYPE
#undef HEAD_DIM
#undef BLOCK_SIZE
#undef THREADS
#undef VEC
#undef GROUP
#undef GQA
#undef PARTITION

// 10 and 11: fp8 caches at the block and head sizes verify's fp8 groups reach beyond 16 and
// 64/128 (since 2026-12-07): fp16 over fp8_e5m2, d=256 (32 chunks of 8 bytes), 8-token pages, v2
// per KV head with 2 heads and 64-token partitions; bf16 over fp8_e4m3, d=96, 48-token pages (no
// power of two), v1 per query head.
#define DTYPE 1
#define KV_DTYPE 2
#define HEAD_DIM 256
#define BLOCK_SIZE 8
#define THREADS 128
#define VEC 8
#define GROUP 1
#define GQA 2
#define PARTITION 64
namespace cfg10 {
#include "kernels/decode.cuh"
}
#undef DTYPE
#undef KV_DTYPE
#undef HEAD_DIM
#undef BLOCK_SIZE
#undef THREADS
#undef VEC
#undef GROUP
#undef GQA
#undef PARTITION

#define DTYPE 2
#define KV_DTYPE 1
#define HEAD_DIM 96
#define BLOCK_SIZE 48
#define THREADS 64
#define VEC 8
#define GROUP 0
#define GQA 1
#define PARTITION 0
namespace cfg11 {
#include "kernels/decode.cuh"
}

using namespace attn;

namespace {

struct Case {
  DType dtype;
  int head_dim, block_size, threads, vec, group, gqa, partition;
  std::optional<DType> kv{}; // an fp8 cache: per-tensor and per-head scales far from 1
};

// Problem parameters for a configuration and mask variant `m`.
AttnParams make_params(const Case& c, int m) {
  AttnParams p;
  p.num_kv_heads = 2;
  p.num_heads = 2 * c.gqa;
  if (c.group == 0 && c.gqa == 1) {
    p.num_heads = 4; // GQA through the per-query-head path too
  }
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
    p.window_left = 70;
    p.window_right = 3;
    break;
  default:
    break;
  }
  return p;
}

template <typename E> const E* in(const HostTensor& t) {
  return reinterpret_cast<const E*>(t.raw());
}

RunOutput fresh_output(const Problem& pr) {
  const AttnParams& p = pr.params;
  RunOutput o;
  o.out = HostTensor(p.dtype, {pr.batch, p.num_heads, p.head_dim});
  poison(o.out);
  o.lse.assign(std::size_t(pr.batch) * p.num_heads, 0.0f);
  poison(o.lse);
  return o;
}

emu::Dim dim(const cuda::Dim3& d) { return {d.x, d.y, d.z}; }

// An fp8 cache's scales as the CUDA backend passes them (null for other caches).
struct Scales {
  std::vector<float> k, v;
  explicit Scales(const Problem& pr) : k(pr.kernel_key_scales()), v(pr.kernel_value_scales()) {}
  const float* kp() const { return k.empty() ? nullptr : k.data(); }
  const float* vp() const { return v.empty() ? nullptr : v.data(); }
};

// Launches a decode_v1 entry point over the problem exactly as the CUDA backend does; C is the
// cache's element type (E, or unsigned char for fp8).
template <typename E, typename C = E, typename Kernel>
RunOutput run_v1(Kernel kernel, const Problem& pr, const cuda::DecodeVariant& v) {
  const AttnParams& p = pr.params;
  const cuda::DecodeLaunch l = cuda::decode_launch(v, pr);
  RunOutput o = fresh_output(pr);
  E* out = reinterpret_cast<E*>(o.out.raw());
  const Scales sc(pr);
  emu::launch(dim(l.grid), int(l.block.x), 0, [&] {
    kernel(out, o.lse.data(), in<E>(pr.query), in<C>(pr.key_cache), in<C>(pr.value_cache),
           pr.block_tables.data(), pr.context_lens.data(), p.num_heads, p.num_kv_heads,
           pr.max_blocks_per_seq, float(p.effective_scale()), float(p.softcap), p.causal ? 1 : 0,
           p.window_left, p.window_right, sc.kp(), sc.vp(), pr.num_kv_scales());
  });
  return o;
}

// decode_v2 and its reduce, with a workspace poisoned so that reading an unwritten partial shows.
template <typename E, typename C = E, typename Kernel, typename Reduce>
RunOutput run_v2(Kernel kernel, Reduce reduce, const Problem& pr, const cuda::DecodeVariant& v) {
  const AttnParams& p = pr.params;
  const cuda::DecodeLaunch l = cuda::decode_launch(v, pr);
  RunOutput o = fresh_output(pr);
  E* out = reinterpret_cast<E*>(o.out.raw());
  std::vector<float> ws(std::size_t(l.workspace_floats), 0.0f);
  poison(ws);
  const std::size_t parts = std::size_t(pr.batch) * p.num_heads * l.max_parts;
  float* ws_m = ws.data();
  float* ws_l = ws_m + parts;
  float* ws_o = ws_l + parts;
  const Scales sc(pr);
  emu::launch(dim(l.grid), int(l.block.x), 0, [&] {
    kernel(out, o.lse.data(), in<E>(pr.query), in<C>(pr.key_cache), in<C>(pr.value_cache),
           pr.block_tables.data(), pr.context_lens.data(), p.num_heads, p.num_kv_heads,
           pr.max_blocks_per_seq, float(p.effective_scale()), float(p.softcap), p.causal ? 1 : 0,
           p.window_left, p.window_right, sc.kp(), sc.vp(), pr.num_kv_scales(), ws_m, ws_l, ws_o,
           l.max_parts);
  });
  emu::launch(dim(l.reduce_grid), int(l.reduce_block.x), std::size_t(l.reduce_smem / 4), [&] {
    reduce(out, o.lse.data(), pr.context_lens.data(), ws_m, ws_l, ws_o, p.num_heads, l.max_parts);
  });
  return o;
}

cuda::DecodeVariant variant_of(const Case& c, const AttnParams& p) {
  KernelConfig cfg;
  cfg.family = c.partition > 0 ? Family::decode_v2 : Family::decode_v1;
  cfg.params = {{"threads", c.threads}, {"vec", c.vec}, {"split", c.group}};
  if (c.partition > 0) {
    cfg.params["partition"] = c.partition;
  }
  cuda::DecodeVariant v = cuda::decode_variant(cfg, p);
  EXPECT_EQ(v.gqa, c.group ? c.gqa : 1);
  return v;
}

// Every mask variant on ragged and edge lengths (0, 1, bs-1, bs, bs+1, partition edges).
template <typename Run> void check_case(const Case& c, Run run, uint64_t seed) {
  for (int m = 0; m < 4; ++m) {
    const AttnParams p = make_params(c, m);
    std::vector<int> parts = {c.partition > 0 ? c.partition : 64};
    std::vector<int> lens = ragged_lengths(seed + m, 5, c.block_size, parts, 3 * parts[0] + 7);
    lens.push_back(0);
    GenOptions g;
    g.seed = seed * 10 + m;
    if (c.kv) {
      // Scales far from 1, per tensor and per KV head in turn (values near E4M3's 448 and in
      // the subnormals), and the formats' NaN patterns in the slots nobody reads.
      g.k_scale = m % 2 == 0 ? std::vector<float>{1.0f / 64} : std::vector<float>{24.0f, 0.37f};
      g.v_scale = m % 2 == 0 ? std::vector<float>{4.0f} : std::vector<float>{0.37f, 1.0f / 64};
      g.nan_tails = true;
    }
    const Problem pr = make_decode_problem(p, lens, g);
    const ReferenceResult ref = reference_attention(pr);
    const RunOutput o = run(pr, variant_of(c, p));
    const CheckReport rep = check_output(o.out, &o.lse, ref, tolerance_for(p.dtype));
    EXPECT_TRUE(rep.pass) << "seed " << g.seed << " mask variant " << m << " " << pr.describe()
                          << "\n"
                          << rep.summary() << "\n"
                          << rep.details();
  }
}

// An infinity in V at the last key a CTA reads: the keys past the range re-read that key with
// weight 0, and 0 * infinity is NaN, so they must not add their products. KV head 1, dimension
// 5, the last key of a 300-token and a 77-token context (E4M3, without infinities, puts its NaN
// there instead).
template <typename Run> void check_special_values(const Case& c, Run run) {
  const AttnParams p = make_params(c, 0);
  GenOptions g;
  g.seed = 13;
  if (c.kv) {
    test::far_fp8_scales(g, false, p.num_kv_heads);
  }
  const Problem pr = test::decode_with_last_key_infinities(p, g);
  const ReferenceResult ref = reference_attention(pr);
  const int specials = test::specials_matching(ref, run(pr, variant_of(c, p)),
                                               tolerance_for(p.dtype), pr.describe());
  // Dimension 5 of KV head 1's query heads, in both sequences.
  EXPECT_EQ(specials, p.num_heads) << pr.describe();
}

} // namespace

TEST(CudaKernelEmulation, V1Fp16PerQueryHead) {
  const Case c{DType::f16, 64, 16, 64, 8, 0, 1, 0};
  check_case(
      c,
      [](const Problem& pr, const cuda::DecodeVariant& v) {
        return run_v1<uint16_t>(cfg1::decode_v1, pr, v);
      },
      11);
}

TEST(CudaKernelEmulation, V1Bf16PerKvHeadPartialRows) {
  const Case c{DType::bf16, 80, 8, 128, 8, 1, 4, 0};
  check_case(
      c,
      [](const Problem& pr, const cuda::DecodeVariant& v) {
        return run_v1<uint16_t>(cfg2::decode_v1, pr, v);
      },
      21);
}

TEST(CudaKernelEmulation, V2Fp32PerQueryHead) {
  const Case c{DType::f32, 96, 32, 64, 4, 0, 1, 64};
  check_case(
      c,
      [](const Problem& pr, const cuda::DecodeVariant& v) {
        return run_v2<float>(cfg3::decode_v2, cfg3::decode_v2_reduce, pr, v);
      },
      31);
}

TEST(CudaKernelEmulation, V2Fp16PerKvHead) {
  const Case c{DType::f16, 128, 16, 128, 4, 1, 2, 32};
  check_case(
      c,
      [](const Problem& pr, const cuda::DecodeVariant& v) {
        return run_v2<uint16_t>(cfg4::decode_v2, cfg4::decode_v2_reduce, pr, v);
      },
      41);
}

TEST(CudaKernelEmulation, V2Fp32EightHeadsPerKvHead) {
  const Case c{DType::f32, 112, 64, 64, 4, 1, 8, 128};
  check_case(
      c,
      [](const Problem& pr, const cuda::DecodeVariant& v) {
        return run_v2<float>(cfg5::decode_v2, cfg5::decode_v2_reduce, pr, v);
      },
      51);
}

TEST(CudaKernelEmulation, V1Bf16ThreeChunksPerLane) {
  const Case c{DType::bf16, 192, 32, 64, 2, 0, 1, 0};
  check_case(
      c,
      [](const Problem& pr, const cuda::DecodeVariant& v) {
        return run_v1<uint16_t>(cfg6::decode_v1, pr, v);
      },
      61);
}

TEST(CudaKernelEmulation, V1Fp16OverE4m3PerKvHead) {
  const Case c{DType::f16, 128, 16, 64, 8, 1, 4, 0, DType::fp8_e4m3};
  check_case(
      c,
      [](const Problem& pr, const cuda::DecodeVariant& v) {
        return run_v1<uint16_t, uint8_t>(cfg7::decode_v1, pr, v);
      },
      71);
}

TEST(CudaKernelEmulation, V2Bf16OverE5m2PerQueryHead) {
  const Case c{DType::bf16, 64, 16, 128, 4, 0, 1, 32, DType::fp8_e5m2};
  check_case(
      c,
      [](const Problem& pr, const cuda::DecodeVariant& v) {
        return run_v2<uint16_t, uint8_t>(cfg8::decode_v2, cfg8::decode_v2_reduce, pr, v);
      },
      81);
}

TEST(CudaKernelEmulation, V2Fp32OverE4m3PartialRows) {
  const Case c{DType::f32, 80, 32, 64, 2, 1, 2, 64, DType::fp8_e4m3};
  check_case(
      c,
      [](const Problem& pr, const cuda::DecodeVariant& v) {
        return run_v2<float, uint8_t>(cfg9::decode_v2, cfg9::decode_v2_reduce, pr, v);
      },
      91);
}
TEST(CudaKernelEmulation, V2Fp16OverE5m2HeadDim256Block8) {
  const Case c{DType::f16, 256, 8, 128, 8, 1, 2, 64, DType::fp8_e5m2};
  check_case(
      c,
      [](const Problem& pr, const cuda::DecodeVariant& v) {
        return run_v2<uint16_t, uint8_t>(cfg10::decode_v2, cfg10::decode_v2_reduce, pr, v);
      },
      101);
}

TEST(CudaKernelEmulation, V1Bf16OverE4m3HeadDim96Block48) {
  const Case c{DType::bf16, 96, 48, 64, 8, 0, 1, 0, DType::fp8_e4m3};
  check_case(
      c,
      [](const Problem& pr, const cuda::DecodeVariant& v) {
        return run_v1<uint16_t, uint8_t>(cfg11::decode_v1, pr, v);
      },
      111);
}

TEST(CudaKernelEmulation, SpecialValueAtTheLastKeyStaysExact) {
  check_special_values({DType::f16, 64, 16, 64, 8, 0, 1, 0},
                       [](const Problem& pr, const cuda::DecodeVariant& v) {
                         return run_v1<uint16_t>(cfg1::decode_v1, pr, v);
                       });
  check_special_values({DType::f32, 96, 32, 64, 4, 0, 1, 64},
                       [](const Problem& pr, const cuda::DecodeVariant& v) {
                         return run_v2<float>(cfg3::decode_v2, cfg3::decode_v2_reduce, pr, v);
                       });
  check_special_values({DType::f16, 128, 16, 64, 8, 1, 4, 0, DType::fp8_e4m3},
                       [](const Problem& pr, const cuda::DecodeVariant& v) {
                         return run_v1<uint16_t, uint8_t>(cfg7::decode_v1, pr, v);
                       });
  check_special_values({DType::bf16, 64, 16, 128, 4, 0, 1, 32, DType::fp8_e5m2},
                       [](const Problem& pr, const cuda::DecodeVariant& v) {
                         return run_v2<uint16_t, uint8_t>(cfg8::decode_v2, cfg8::decode_v2_reduce,
                                                          pr, v);
                       });
}
#else
TEST(CudaKernelEmulation, NeedsTheCudaBackend) { GTEST_SKIP() << "built without the CUDA backend"; }
#endif
