// The CUDA decode kernels against the reference on a real GPU: randomized problems (dtypes, head
// dims, block sizes, GQA, masks, ragged and edge lengths) with poisoned outputs, v1 and v2.
// Exits 77 (ctest skip) where there is no GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <iterator>
#include <string>

#include "src/backends/cuda/cuda_devices.h"

#ifdef ATTN_HAVE_CUDA
#include "reference/reference.h"
#include <chrono>

#include <cuda_runtime_api.h>

#include "src/backends/cuda/copy_bandwidth.h"
#include "src/backends/cuda/cuda_backend.h"
#include "src/backends/cuda/cuda_check.h"
#include "src/backends/cuda/decode_launch.h"
#include "src/backends/cuda/device_runs.h"
#include "src/backends/cuda/precompile.h"
#include "src/model/errors.h"
#include "src/model/problem_gen.h"
#include "src/validation/check.h"
#include "tests/support/problems.h"
#include "tests/support/rewritten.h"
#include "tests/support/specials.h"

using namespace attn;

namespace {

Backend& gpu() {
  static std::unique_ptr<Backend> be = make_cuda_backend(0);
  return *be;
}

// Runs `cfg` on `pr` with poisoned outputs and checks it against `ref`; returns the report.
CheckReport run_and_check(const Problem& pr, const KernelConfig& cfg, const ReferenceResult& ref) {
  const RunOutput o = run_once(gpu(), pr, cfg);
  return check_output(o.out, &o.lse, ref, tolerance_for(pr.params.dtype));
}

struct Shape {
  int heads, kv_heads, head_dim, block_size;
};

constexpr Shape kShapes[] = {{8, 8, 64, 8},   {16, 4, 80, 16},   {12, 2, 96, 32},
                             {8, 1, 112, 64}, {32, 8, 128, 128}, {14, 2, 192, 16},
                             {8, 4, 256, 32}, {28, 4, 128, 16}};
constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr int kSeeds = 2;

AttnParams case_params(int case_index) {
  const Shape& s = kShapes[case_index % std::size(kShapes)];
  AttnParams p;
  p.num_heads = s.heads;
  p.num_kv_heads = s.kv_heads;
  p.head_dim = s.head_dim;
  p.block_size = s.block_size;
  p.dtype = kDtypes[case_index % 3];
  return p;
}

// Two configurations per family and case, rotating through the space.
std::vector<KernelConfig> case_configs(int case_index, const AttnParams& p) {
  std::vector<KernelConfig> out;
  for (Family f : {Family::decode_v1, Family::decode_v2}) {
    const auto space = cuda::decode_config_space(f, p);
    out.push_back(space[std::size_t(case_index) % space.size()]);
    out.push_back(space[std::size_t(case_index * 7 + 3) % space.size()]);
  }
  return out;
}

AttnParams space_params() {
  AttnParams p;
  p.num_heads = 16;
  p.num_kv_heads = 4;
  p.head_dim = 128;
  p.block_size = 16;
  p.dtype = DType::f16;
  return p;
}

// The space's parameters with each cache dtype NegatedInputsNegateTheOutputInPlace runs (the
// first is space_params() itself), and the configurations it runs on each: every one of the
// 16-bit cache, three of each family on the fp8 ones (each of those variants is another compile).
std::vector<AttnParams> rewritten_params() {
  std::vector<AttnParams> out;
  for (const DType kv : {DType::f16, DType::fp8_e4m3, DType::fp8_e5m2}) {
    AttnParams p = space_params();
    if (is_fp8(kv)) {
      p.kv_dtype = kv;
    }
    out.push_back(p);
  }
  return out;
}

std::vector<KernelConfig> rewritten_configs(const AttnParams& p) {
  std::vector<KernelConfig> out;
  for (Family f : {Family::decode_v1, Family::decode_v2}) {
    const auto space = cuda::decode_config_space(f, p);
    const std::size_t n = space.size();
    for (std::size_t k = 0; k < n; ++k) {
      if (!is_fp8(p.cache_dtype()) || k == 0 || k == n / 3 || k == 2 * n / 3) {
        out.push_back(space[k]);
      }
    }
  }
  return out;
}

// The fp8 cases: both cache formats under each query dtype, over the shapes in turn, with
// scales far from 1 (per tensor, then per KV head) so that a dropped or doubled scale fails.
constexpr int kFp8Cases = 12;

AttnParams fp8_case_params(int c) { return test::fp8_variant(case_params(c), c, kDtypes); }

// Compiles every variant the suite runs on all cores first: the backend compiles one at a time.
class GpuDecode : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    std::vector<cuda::DecodeVariant> variants;
    for (int c = 0; c < kSeeds * int(std::size(kShapes)); ++c) {
      const AttnParams p = case_params(c);
      for (const auto& cfg : case_configs(c, p)) {
        variants.push_back(cuda::decode_variant(cfg, p));
      }
    }
    for (const AttnParams& p : rewritten_params()) {
      for (const auto& cfg : rewritten_configs(p)) {
        variants.push_back(cuda::decode_variant(cfg, p));
      }
    }
    for (int c = 0; c < kFp8Cases; ++c) {
      const AttnParams p = fp8_case_params(c);
      for (const auto& cfg : case_configs(c, p)) {
        variants.push_back(cuda::decode_variant(cfg, p));
      }
    }
    const DeviceInfo& d = gpu().info();
    (void)cuda::precompile_decode(variants, d.cc_major * 10 + d.cc_minor);
  }
};

} // namespace

TEST_F(GpuDecode, RandomizedAgainstReference) {
  int case_index = 0;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    for (std::size_t s = 0; s < std::size(kShapes); ++s) {
      AttnParams p = case_params(case_index);
      switch (case_index % 5) {
      case 1:
        p.window_left = 37; // sliding window of 38 keys
        break;
      case 2:
        p.softcap = 30.0;
        p.scale = 0.3;
        break;
      case 3:
        p.causal = false;
        p.window_left = 300;
        p.window_right = 0;
        break;
      case 4:
        p.window_left = 0; // only the last key is visible
        break;
      default:
        break;
      }
      std::vector<int> lens =
          ragged_lengths(seed * 100 + case_index, 7, p.block_size, {256, 512, 1024}, 1100);
      if (case_index % 4 == 0) {
        lens.push_back(0); // an empty row: out = 0, lse = -inf
      }
      GenOptions g;
      g.seed = seed * 1000 + case_index;
      const Problem pr = make_decode_problem(p, lens, g);
      const ReferenceResult ref = reference_attention(pr);
      for (const KernelConfig& cfg : case_configs(case_index, p)) {
        const auto why = gpu().can_run(cfg, pr);
        ASSERT_EQ(why, std::nullopt) << cfg.key() << " " << pr.describe();
        const CheckReport rep = run_and_check(pr, cfg, ref);
        EXPECT_TRUE(rep.pass) << "seed " << g.seed << " " << cfg.key() << " " << pr.describe()
                              << "\n"
                              << rep.summary() << "\n"
                              << rep.details();
      }
      ++case_index;
    }
  }
}

// fp8 caches on the device: sm_89 and later convert with cvt.*x2 instructions, which the CPU
// emulation tests cannot reach; the values near E4M3's 448 and in the subnormals, the NaNs in
// the slots nobody reads and the masks are the emulation tests' cases.
TEST_F(GpuDecode, Fp8CachesAgainstReference) {
  for (int c = 0; c < kFp8Cases; ++c) {
    AttnParams p = fp8_case_params(c);
    if (c % 3 == 1) {
      p.window_left = 37;
    } else if (c % 3 == 2) {
      p.softcap = 30.0;
    }
    std::vector<int> lens = ragged_lengths(500 + c, 7, p.block_size, {256, 512, 1024}, 1100);
    lens.push_back(0);
    GenOptions g;
    g.seed = 7000 + c;
    g.nan_tails = true;
    test::far_fp8_scales(g, (c / 3) % 2 == 1, p.num_kv_heads);
    const Problem pr = make_decode_problem(p, lens, g);
    const ReferenceResult ref = reference_attention(pr);
    for (const KernelConfig& cfg : case_configs(c, p)) {
      ASSERT_EQ(gpu().can_run(cfg, pr), std::nullopt) << cfg.key() << " " << pr.describe();
      const CheckReport rep = run_and_check(pr, cfg, ref);
      EXPECT_TRUE(rep.pass) << "seed " << g.seed << " " << cfg.key() << " " << pr.describe() << "\n"
                            << rep.summary() << "\n"
                            << rep.details();
    }
  }
}

TEST_F(GpuDecode, EveryConfigurationOfTheSpace) {
  const AttnParams p = space_params();
  GenOptions g;
  g.seed = 4242;
  const Problem pr =
      make_decode_problem(p, {1, 15, 16, 17, 255, 257, 511, 513, 1023, 1025, 2100}, g);
  const ReferenceResult ref = reference_attention(pr);
  for (Family f : {Family::decode_v1, Family::decode_v2}) {
    for (const auto& cfg : gpu().config_space(f, p)) {
      ASSERT_EQ(gpu().can_run(cfg, pr), std::nullopt) << cfg.key();
      const CheckReport rep = run_and_check(pr, cfg, ref);
      EXPECT_TRUE(rep.pass) << "seed " << g.seed << " " << cfg.key() << "\n"
                            << rep.summary() << "\n"
                            << rep.details();
    }
  }
}

// The checked run's second call on a GPU: the query and caches negated in the device buffers
// the kernels read (brought back, flipped, written to the same addresses) negate the output bit
// for bit with the same lse, negated back they give the first answer, and no configuration
// writes into the guards after out and lse. fp8 caches too, with scales far from 1.
TEST_F(GpuDecode, NegatedInputsNegateTheOutputInPlace) {
  for (const AttnParams& p : rewritten_params()) {
    GenOptions g;
    g.seed = 4545;
    if (is_fp8(p.cache_dtype())) {
      g.k_scale = {0.37f};
      g.v_scale = {3.0f};
    }
    const Problem pr = make_decode_problem(p, {1, 257, 1025}, g);
    for (const auto& cfg : rewritten_configs(p)) {
      SCOPED_TRACE(std::string(dtype_name(p.cache_dtype())) + " " + cfg.key());
      test::expect_negation_round_trip(gpu(), pr, cfg);
    }
  }
}

// An infinity in V at the last key of a context stays an infinity in every configuration: the
// keys past a CTA's range re-read its last key with weight 0, and must not add 0 * infinity.
TEST_F(GpuDecode, InfinityAtTheLastKeyStaysAnInfinity) {
  const AttnParams p = space_params();
  GenOptions g;
  g.seed = 4343;
  const Problem pr = test::decode_with_last_key_infinities(p, g);
  const ReferenceResult ref = reference_attention(pr);
  for (Family f : {Family::decode_v1, Family::decode_v2}) {
    for (const auto& cfg : gpu().config_space(f, p)) {
      const int specials =
          test::specials_matching(ref, run_once(gpu(), pr, cfg), tolerance_for(p.dtype), cfg.key());
      // Dimension 5 of KV head 1's four query heads, in both sequences.
      EXPECT_EQ(specials, 2 * (p.num_heads / p.num_kv_heads)) << cfg.key();
    }
  }
}

TEST_F(GpuDecode, LongContextAndV1EqualsV2) {
  // v1 has no shared-memory limit on the context: one pass over 70k keys.
  AttnParams p;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.block_size = 16;
  p.dtype = DType::bf16;
  GenOptions g;
  g.seed = 77;
  g.pool_factor = 1.2;
  const Problem pr = make_decode_problem(p, {70001, 3}, g);
  const ReferenceResult ref = reference_attention(pr);
  const RunOutput v1 = run_once(gpu(), pr, {Family::decode_v1, {{"split", 1}}});
  const RunOutput v2 = run_once(gpu(), pr, {Family::decode_v2, {{"partition", 1024}}});
  const Tolerance tol = tolerance_for(p.dtype);
  const CheckReport r1 = check_output(v1.out, &v1.lse, ref, tol);
  const CheckReport r2 = check_output(v2.out, &v2.lse, ref, tol);
  EXPECT_TRUE(r1.pass) << r1.summary() << "\n" << r1.details();
  EXPECT_TRUE(r2.pass) << r2.summary() << "\n" << r2.details();
  // v1 and v2 agree with each other at least as closely as each does with the reference.
  for (std::size_t i = 0; i < v1.lse.size(); ++i) {
    EXPECT_NEAR(v1.lse[i], v2.lse[i], 2 * tol.lse_atol) << "lse " << i;
  }
}

TEST_F(GpuDecode, TimingAndCopyBandwidth) {
  AttnParams p;
  p.num_heads = 32;
  p.num_kv_heads = 8;
  p.head_dim = 128;
  p.block_size = 16;
  p.dtype = DType::f16;
  GenOptions g;
  g.seed = 5;
  g.pool_factor = 1.0;
  const Problem pr = make_decode_problem(p, std::vector<int>(8, 4096), g);
  auto run = gpu().prepare(pr, {Family::decode_v2, {{"partition", 512}}});
  TimingOptions opt;
  opt.max_seconds = 0.05;
  const TimingResult t = run->time(opt);
  EXPECT_GT(t.median_s, 0.0);
  EXPECT_GE(t.reps, opt.min_reps);
  EXPECT_EQ(t.method.rfind("cuda-events, stream held, L2 flushed (", 0), 0u) << t.method;
  EXPECT_GE(t.warmup_s, opt.warmup_seconds);
  ASSERT_TRUE(t.clocks.has_value());
  if (t.clocks->available()) {
    EXPECT_GT(t.clocks->sm_clock_mhz, 0);
    EXPECT_GE(t.clocks->sm_clock_max_mhz, t.clocks->sm_clock_mhz);
  } else {
    EXPECT_EQ(t.clocks->source.rfind("nvml unavailable: ", 0), 0u) << t.clocks->source;
  }
  // The same call replayed from a CUDA graph: both launches in one graph, still timed.
  opt.mode = TimingMode::graph;
  const TimingResult gt = run->time(opt);
  EXPECT_GT(gt.median_s, 0.0);
  EXPECT_EQ(gt.method.rfind("cuda-graph replay, stream held", 0), 0u) << gt.method;
  // Graph replay removes launch overhead, never adds much: within 2x of the event timing.
  EXPECT_LT(gt.median_s, 2.0 * t.median_s);
  // The graph computes what launch() computes.
  run->poison_outputs();
  (void)run->time(opt);
  const RunOutput replayed = run->download();
  run->poison_outputs();
  run->run();
  const RunOutput direct = run->download();
  EXPECT_EQ(replayed.out.data, direct.out.data);
  EXPECT_EQ(replayed.lse, direct.lse);
  opt.mode = TimingMode::events;
  const auto copy = cuda::measure_copy_bandwidth(0, int64_t(256) << 20, opt);
  EXPECT_GT(copy.bytes_per_s, 1e10); // any data-centre GPU copies faster than 10 GB/s
  EXPECT_EQ(
      copy.timing.method.rfind("cuda-events, cudaMemcpyAsync device to device, stream held", 0), 0u)
      << copy.timing.method;
}

// A call that synchronises the host while it is enqueued (as a plugin's cudaStreamSynchronize or
// a Python module's .item() does) would wait for the kernel that holds the stream: the probe finds
// it, and its reps are timed without the hold instead of each waiting 2 s and failing.
TEST_F(GpuDecode, ACallThatSynchronisesTheHostIsTimedWithoutTheHold) {
  std::string why;
  const DeviceInfo d = cuda_devices(why).at(0);
  cuda::DeviceStream stream(
      0, d.l2_bytes, d.uuid,
      cuda::pick_target_arch(d.cc_major * 10 + d.cc_minor, cuda::nvrtc_supported_archs()));
  cuda::DeviceBuffer src{std::size_t(64) << 20};
  cuda::DeviceBuffer dst{std::size_t(64) << 20};
  TimingOptions opt;
  opt.max_seconds = 0.05;
  const auto t0 = std::chrono::steady_clock::now();
  const TimingResult t = stream.time(
      [&] {
        ATTN_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), src.bytes(), cudaMemcpyDeviceToDevice,
                                        stream.get()));
        ATTN_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
      },
      opt, "cuda-events");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(t.method.rfind("cuda-events, stream not held (the call synchronises the host", 0), 0u)
      << t.method;
  EXPECT_GT(t.median_s, 0.0);
  EXPECT_LT(t.median_s, 0.1) << "a rep waited for a hold";
  EXPECT_GE(t.reps, opt.min_reps);
  // The probes (0.2 s, then 2 s) and the measurement; not a hold timeout per rep.
  EXPECT_LT(seconds, 10.0);
}

TEST_F(GpuDecode, PreparedRunRefusesWhatCanRunRefuses) {
  AttnParams p;
  p.num_heads = 4;
  p.num_kv_heads = 4;
  p.head_dim = 72;
  p.block_size = 16;
  p.dtype = DType::f16;
  const Problem pr = make_decode_problem(p, {10}, {});
  const KernelConfig cfg{Family::decode_v1, {}};
  ASSERT_TRUE(gpu().can_run(cfg, pr).has_value());
  EXPECT_THROW((void)gpu().prepare(pr, cfg), InputError);
}
#endif

int main(int argc, char** argv) {
  std::string why;
  if (attn::cuda_devices(why).empty()) {
    std::printf("gpu_decode: skipped: %s\n", why.c_str());
    return 77;
  }
#ifndef ATTN_HAVE_CUDA
  std::printf("gpu_decode: skipped: built without the CUDA backend\n");
  return 77;
#else
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
#endif
}
