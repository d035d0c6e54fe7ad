// The CUDA prefill kernel against the reference on a real GPU: randomized varlen batches (dtypes,
// head dims, page sizes, GQA, masks, chunked prefill, rows without keys) with poisoned outputs,
// every configuration of the space, and the masked-tile skipping seen in the timings.
// Exits 77 (ctest skip) where there is no GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <iterator>
#include <string>

#include "src/backends/cuda/cuda_devices.h"

#ifdef ATTN_HAVE_CUDA
#include "reference/reference.h"
#include "src/backends/cuda/cuda_backend.h"
#include "src/backends/cuda/precompile.h"
#include "src/backends/cuda/prefill_launch.h"
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

struct Shape {
  int heads, kv_heads, head_dim, block_size;
};

constexpr Shape kShapes[] = {{8, 8, 64, 8},   {16, 4, 80, 16},  {12, 2, 96, 32},
                             {8, 1, 112, 64}, {8, 2, 128, 256}, {14, 2, 192, 16},
                             {8, 4, 256, 32}, {28, 4, 128, 24}, {16, 2, 64, 128}};
constexpr DType kDtypes[] = {DType::bf16, DType::f16, DType::f32};
constexpr int kSeeds = 2;

AttnParams case_params(int case_index) {
  const Shape& s = kShapes[case_index % std::size(kShapes)];
  AttnParams p;
  p.num_heads = s.heads;
  p.num_kv_heads = s.kv_heads;
  p.head_dim = s.head_dim;
  p.block_size = s.block_size;
  p.dtype = kDtypes[case_index % 3];
  switch (case_index % 6) {
  case 1:
    p.window_left = 37; // sliding window of 38 keys
    break;
  case 2:
    p.softcap = 30.0;
    p.scale = 0.3;
    break;
  case 3:
    p.causal = false;
    p.window_left = 100;
    p.window_right = 5;
    break;
  case 4:
    p.causal = false;
    break;
  case 5:
    p.window_left = 0; // every row sees only its own position
    break;
  default:
    break;
  }
  return p;
}

// Two configurations per case, rotating through the space.
std::vector<KernelConfig> case_configs(int case_index, const AttnParams& p) {
  const auto space = cuda::prefill_config_space(p);
  return {space[std::size_t(case_index) % space.size()],
          space[std::size_t(case_index * 5 + 3) % space.size()]};
}

// A varlen batch: full prompts, chunked prefill (q_len < k_len), a prompt with more rows than
// keys, an empty cache, and ragged edge lengths.
void case_lengths(uint64_t seed, const AttnParams& p, std::vector<int>& q, std::vector<int>& k) {
  const std::vector<int> edges = ragged_lengths(seed, 4, p.block_size, {64, 128}, 300);
  q.clear();
  k.clear();
  for (int len : edges) {
    q.push_back(len);
    k.push_back(len);
  }
  q.insert(q.end(), {7, 1, 129, 40, 3});
  k.insert(k.end(), {400, 257, 129, 20, 0});
}

// The fp8 cases: both cache formats under each query dtype, over the shapes in turn, with
// scales far from 1 (per tensor, then per KV head) so that a dropped or doubled scale fails.
constexpr int kFp8Cases = 12;

AttnParams fp8_case_params(int c) { return test::fp8_variant(case_params(c), c, kDtypes); }

class GpuPrefill : public ::testing::Test {
protected:
  // Compiles every variant the suite runs on all cores first: the backend compiles one at a time.
  static void SetUpTestSuite() {
    std::vector<cuda::PrefillVariant> variants;
    for (int c = 0; c < kSeeds * int(std::size(kShapes)); ++c) {
      const AttnParams p = case_params(c);
      for (const auto& cfg : case_configs(c, p)) {
        variants.push_back(cuda::prefill_variant(cfg, p));
      }
    }
    for (const AttnParams& p : {space_params(), e4m3_space_params()}) {
      for (const auto& cfg : cuda::prefill_config_space(p)) {
        variants.push_back(cuda::prefill_variant(cfg, p));
      }
    }
    for (int c = 0; c < kFp8Cases; ++c) {
      const AttnParams p = fp8_case_params(c);
      for (const auto& cfg : case_configs(c, p)) {
        variants.push_back(cuda::prefill_variant(cfg, p));
      }
    }
    const DeviceInfo& d = gpu().info();
    (void)cuda::precompile_prefill(variants, d.cc_major * 10 + d.cc_minor);
  }

public:
  static AttnParams space_params() {
    AttnParams p;
    p.num_heads = 16;
    p.num_kv_heads = 4;
    p.head_dim = 128;
    p.block_size = 16;
    p.dtype = DType::bf16;
    return p;
  }
  // The same with an E4M3 cache, for NegatedInputsNegateTheOutputInPlace.
  static AttnParams e4m3_space_params() {
    AttnParams p = space_params();
    p.kv_dtype = DType::fp8_e4m3;
    return p;
  }
};

CheckReport run_and_check(const Problem& pr, const KernelConfig& cfg, const ReferenceResult& ref) {
  const RunOutput o = run_once(gpu(), pr, cfg);
  return check_output(o.out, &o.lse, ref, tolerance_for(pr.params.dtype));
}

} // namespace

TEST_F(GpuPrefill, RandomizedAgainstReference) {
  int case_index = 0;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    for (std::size_t s = 0; s < std::size(kShapes); ++s) {
      const AttnParams p = case_params(case_index);
      std::vector<int> q, k;
      case_lengths(seed * 100 + case_index, p, q, k);
      GenOptions g;
      g.seed = seed * 1000 + case_index;
      g.shared_prefix = case_index % 4 == 1;
      const Problem pr = make_prefill_problem(p, q, k, g);
      const ReferenceResult ref = reference_attention(pr);
      for (const KernelConfig& cfg : case_configs(case_index, p)) {
        const auto why = gpu().can_run(cfg, pr);
        if (p.dtype == DType::f32 && why && why->find("shared memory") != std::string::npos) {
          continue; // large fp32 tiles may exceed the device's shared memory; can_run says so
        }
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

// fp8 caches on the device (sm_89 and later convert with cvt.*x2 instructions, out of the CPU
// emulation's reach): scales far from 1, per tensor and per KV head, values near E4M3's 448 and
// in the subnormals, NaN in the slots nobody reads, every mask of the randomized cases.
TEST_F(GpuPrefill, Fp8CachesAgainstReference) {
  for (int c = 0; c < kFp8Cases; ++c) {
    const AttnParams p = fp8_case_params(c);
    std::vector<int> q, k;
    case_lengths(900 + c, p, q, k);
    GenOptions g;
    g.seed = 9000 + c;
    g.nan_tails = true;
    test::far_fp8_scales(g, (c / 3) % 2 == 1, p.num_kv_heads);
    const Problem pr = make_prefill_problem(p, q, k, g);
    const ReferenceResult ref = reference_attention(pr);
    for (const KernelConfig& cfg : case_configs(c, p)) {
      const auto why = gpu().can_run(cfg, pr);
      if (p.dtype == DType::f32 && why && why->find("shared memory") != std::string::npos) {
        continue; // as in the randomized cases
      }
      ASSERT_EQ(why, std::nullopt) << cfg.key() << " " << pr.describe();
      const CheckReport rep = run_and_check(pr, cfg, ref);
      EXPECT_TRUE(rep.pass) << "seed " << g.seed << " " << cfg.key() << " " << pr.describe() << "\n"
                            << rep.summary() << "\n"
                            << rep.details();
    }
  }
}

TEST_F(GpuPrefill, EveryConfigurationOfTheSpace) {
  AttnParams p = space_params();
  GenOptions g;
  g.seed = 4343;
  const Problem pr =
      make_prefill_problem(p, {1, 15, 64, 65, 200, 33}, {1, 300, 64, 65, 520, 17}, g);
  const ReferenceResult ref = reference_attention(pr);
  for (const auto& cfg : gpu().config_space(Family::prefill, p)) {
    ASSERT_EQ(gpu().can_run(cfg, pr), std::nullopt) << cfg.key();
    const CheckReport rep = run_and_check(pr, cfg, ref);
    EXPECT_TRUE(rep.pass) << "seed " << g.seed << " " << cfg.key() << "\n"
                          << rep.summary() << "\n"
                          << rep.details();
  }
}

// The checked run's second call on a GPU (gpu_decode.cpp's NegatedInputsNegateTheOutputInPlace)
// for every prefill configuration, a bf16 cache and an E4M3 one.
TEST_F(GpuPrefill, NegatedInputsNegateTheOutputInPlace) {
  for (const AttnParams& p : {space_params(), e4m3_space_params()}) {
    GenOptions g;
    g.seed = 4646;
    if (is_fp8(p.cache_dtype())) {
      g.k_scale = {0.37f};
      g.v_scale = {3.0f};
    }
    const Problem pr = make_prefill_problem(p, {1, 65, 33}, {1, 300, 520}, g);
    for (const auto& cfg : gpu().config_space(Family::prefill, p)) {
      SCOPED_TRACE(std::string(dtype_name(p.cache_dtype())) + " " + cfg.key());
      // The 16-bit P.V goes through mma, whose accumulation's rounding the test cannot vouch is
      // sign-symmetric: within a 16-bit ulp (bf16: 2^-8) rather than bit for bit.
      test::expect_negation_round_trip(gpu(), pr, cfg, 1.0 / 128);
    }
  }
}

// A NaN or an infinity in V at a key that only some rows of a boundary tile see reaches only the
// rows that see it, in every configuration (the kernel's accumulate_pv_visible path): a NaN at
// key 40 of a 100-row prompt, an infinity at key 98 of a 3-row chunk over 100 keys, KV head 1,
// dimension 5.
TEST_F(GpuPrefill, SpecialValuesReachOnlyTheRowsThatSeeThem) {
  const AttnParams p = space_params();
  GenOptions g;
  g.seed = 4444;
  const Problem pr = test::prefill_with_specials(p, g);
  const ReferenceResult ref = reference_attention(pr);
  for (const auto& cfg : gpu().config_space(Family::prefill, p)) {
    const int specials =
        test::specials_matching(ref, run_once(gpu(), pr, cfg), tolerance_for(p.dtype), cfg.key());
    // KV head 1's four query heads: the prompt's rows 40..99, the chunk's two rows that see 98.
    EXPECT_EQ(specials, (p.num_heads / p.num_kv_heads) * test::kPrefillSpecialRows) << cfg.key();
  }
}

TEST_F(GpuPrefill, CausalSkipsMaskedTiles) {
  // One 8k prompt: causal walks about half the key tiles of the full one, so it must be clearly
  // faster (the reference is not computed: this is about time, the suites above about values).
  AttnParams p = space_params();
  GenOptions g;
  g.seed = 9;
  g.pool_factor = 1.0;
  const KernelConfig cfg{Family::prefill, {}};
  TimingOptions opt;
  opt.max_seconds = 0.2;
  p.causal = false;
  const double full =
      gpu().prepare(make_prefill_problem(p, {8192}, {8192}, g), cfg)->time(opt).median_s;
  p.causal = true;
  const double causal =
      gpu().prepare(make_prefill_problem(p, {8192}, {8192}, g), cfg)->time(opt).median_s;
  p.window_left = 511;
  const double window =
      gpu().prepare(make_prefill_problem(p, {8192}, {8192}, g), cfg)->time(opt).median_s;
  EXPECT_LT(causal, 0.7 * full) << "causal " << causal << " s, full " << full << " s";
  EXPECT_LT(window, 0.25 * full) << "window " << window << " s, full " << full << " s";
}

TEST_F(GpuPrefill, PreparedRunRefusesWhatCanRunRefuses) {
  AttnParams p = space_params();
  p.head_dim = 72;
  const Problem pr = make_prefill_problem(p, {10}, {10}, {});
  const KernelConfig cfg{Family::prefill, {}};
  ASSERT_TRUE(gpu().can_run(cfg, pr).has_value());
  EXPECT_THROW((void)gpu().prepare(pr, cfg), InputError);
}
#endif

int main(int argc, char** argv) {
  std::string why;
  if (attn::cuda_devices(why).empty()) {
    std::printf("gpu_prefill: skipped: %s\n", why.c_str());
    return 77;
  }
#ifndef ATTN_HAVE_CUDA
  std::printf("gpu_prefill: skipped: built without the CUDA backend\n");
  return 77;
#else
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
#endif
}
