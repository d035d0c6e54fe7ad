// diagnose_failure's fp8 mistakes judge the kernel's output against what the mistake computes with
// a tolerance that grows with the mistake's outputs: a value scale ignored makes every output
// 1/v_scale times larger, and the kernel's rounding error with them.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "src/backends/cpu/cpu_backend.h"
#include "src/validation/diagnose.h"
#include "tests/support/problems.h"

namespace attn {
namespace {

// What diagnose_failure says of `got` on `pr` (decode_v1, split 0, on the CPU backend).
std::vector<std::string> diagnose_answer(const Problem& pr, const RunOutput& got,
                                         const ReferenceResult& ref,
                                         Family family = Family::decode_v1) {
  const Tolerance tol = tolerance_for(pr.params.dtype);
  const auto wrong = wrong_pairs(got.out, nullptr, ref, tol);
  EXPECT_FALSE(wrong.empty());
  auto be = make_cpu_backend({.threads = 1, .kernels = ""});
  KernelConfig cfg;
  cfg.family = family;
  if (family != Family::prefill) {
    cfg.params["split"] = 0;
  }
  return diagnose_failure(*be, cfg, pr, got, ref, tol, wrong, /*ref_threads=*/1);
}

// A kernel's answer: `r`'s output, element i times factor(i), and no lse (as a kernel that
// writes none hands back).
RunOutput answer(const Problem& pr, const ReferenceResult& r,
                 const std::function<double(std::size_t)>& factor) {
  RunOutput got;
  got.lse_written = false;
  got.out = HostTensor(pr.params.dtype, {pr.num_rows(), pr.params.num_heads, pr.params.head_dim});
  for (std::size_t i = 0; i < r.out.size(); ++i) {
    got.out.set(i, float(r.out[i] * factor(i)));
  }
  return got;
}

TEST(Diagnose, AScaleIgnoredIsNamedThoughItsLargerOutputsRoundFurther) {
  AttnParams a = test::params(4, 2, 64, 16, DType::f32);
  a.kv_dtype = DType::fp8_e4m3;
  GenOptions g = test::gen(12);
  g.k_scale = {0.5f};
  g.v_scale = {1.0f / 64};
  const Problem pr = make_decode_problem(a, {40, 97}, g);
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  Problem ignored = pr;
  ignored.v_scale.clear();
  const ReferenceResult mistaken = reference_attention(ignored, {1, {}});
  // The kernel's answer: what the mistake computes, its element nearest zero off by more than the
  // fp32 floor (1e-5) allows an output of attention's size, as fp32 rounding of outputs 64 times
  // larger leaves it.
  RunOutput got;
  got.out = HostTensor(DType::f32, {pr.num_rows(), a.num_heads, a.head_dim});
  std::size_t nearest = 0;
  for (std::size_t i = 0; i < mistaken.out.size(); ++i) {
    got.out.set(i, float(mistaken.out[i]));
    if (std::abs(mistaken.out[i]) < std::abs(mistaken.out[nearest])) {
      nearest = i;
    }
  }
  got.out.set(nearest, float(mistaken.out[nearest] + 4e-5));
  for (const double l : ref.lse) { // a value scale leaves the lse as it is
    got.lse.push_back(float(l));
  }
  const Tolerance tol = tolerance_for(DType::f32);
  const auto wrong = wrong_pairs(got.out, nullptr, ref, tol);
  ASSERT_FALSE(wrong.empty());
  auto be = make_cpu_backend({.threads = 1, .kernels = ""});
  KernelConfig cfg;
  cfg.family = Family::decode_v1;
  cfg.params["split"] = 0;
  const std::vector<std::string> found =
      diagnose_failure(*be, cfg, pr, got, ref, tol, wrong, /*ref_threads=*/1);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], "v_scale is ignored (taken as 1)");
}

// Both scales ignored where k_scale is 1/250: the mistake's scores are 250 times larger, and an
// fp32 kernel computing it rounds its softmax weights by far more than fp32's tolerance (here,
// 2e-3 of every element). No mistake fits element by element; the nearest one normwise is named.
TEST(Diagnose, AScaleMistakeWithFarLargerScoresIsNamedByItsNormwiseDistance) {
  AttnParams a = test::params(4, 2, 64, 16, DType::f32);
  a.kv_dtype = DType::fp8_e5m2;
  GenOptions g = test::gen(16);
  g.k_scale = {0.004f};
  g.v_scale = {1.0f / 64};
  const Problem pr = make_decode_problem(a, {40, 97}, g);
  Problem ignored = pr;
  ignored.k_scale.clear();
  ignored.v_scale.clear();
  const RunOutput got = answer(pr, reference_attention(ignored, {1, {}}),
                               [](std::size_t i) { return i % 2 == 0 ? 1.002 : 0.998; });
  const auto found = diagnose_answer(pr, got, reference_attention(pr, {1, {}}));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(found[0].starts_with("the fp8 scales are ignored")) << found[0];
  EXPECT_NE(found[0].find("within 1e-2 normwise, not element by element"), std::string::npos)
      << found[0];
}

// A prefill kernel that masks causally whatever it is asked: a non-causal call's answer is the
// causal one, and that is named (not a causal limit placed wrong).
TEST(Diagnose, CausalFalseIgnoredIsNamed) {
  AttnParams a = test::params(4, 2, 32, 16, DType::f32);
  a.causal = false;
  const Problem pr = make_prefill_problem(a, {5, 9}, {20, 9}, test::gen(15));
  Problem masked = pr;
  masked.params.causal = true;
  const RunOutput got =
      answer(pr, reference_attention(masked, {1, {}}), [](std::size_t) { return 1.0; });
  const auto found = diagnose_answer(pr, got, reference_attention(pr, {1, {}}), Family::prefill);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], "causal output where non-causal was asked (causal=false is ignored: the "
                      "kernel always masks)");
}

// The scale mistakes of an outside audit's decode plugin, each named: applied twice, not at all,
// and 1/sqrt(num_heads * head_dim).
TEST(Diagnose, ScaleMistakesAreNamed) {
  const AttnParams a = test::params(8, 2, 64, 16, DType::f32);
  const Problem pr = make_decode_problem(a, {40, 97, 5}, test::gen(21));
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const double s = a.effective_scale();
  const std::vector<std::pair<double, std::string>> mistakes = {
      {s * s, "the scale is applied twice (scale squared)"},
      {1.0, "no scale is applied (the scores are the plain dot products)"},
      {1.0 / std::sqrt(8.0 * 64.0),
       "the scale is 1/sqrt(num_heads * head_dim), not 1/sqrt(head_dim)"},
  };
  for (const auto& [scale, what] : mistakes) {
    Problem mistaken = pr;
    mistaken.params.scale = scale;
    const RunOutput got =
        answer(pr, reference_attention(mistaken, {1, {}}), [](std::size_t) { return 1.0; });
    const auto found = diagnose_answer(pr, got, ref);
    ASSERT_EQ(found.size(), 1u) << what;
    EXPECT_EQ(found[0], what);
  }
}

// A softcap ignored where the window covers every key: the softcap is named alone, not with the
// window that changes nothing there.
TEST(Diagnose, ASoftcapIgnoredUnderAWindowThatCoversEveryKeyIsNamedAlone) {
  AttnParams a = test::params(4, 2, 32, 16, DType::f32);
  a.window_left = 100;
  a.softcap = 5.0;
  a.scale = 1.0;
  const Problem pr = make_prefill_problem(a, {5, 9}, {40, 9}, test::gen(22));
  Problem mistaken = pr;
  mistaken.params.softcap = 0.0;
  const RunOutput got =
      answer(pr, reference_attention(mistaken, {1, {}}), [](std::size_t) { return 1.0; });
  const auto found = diagnose_answer(pr, got, reference_attention(pr, {1, {}}), Family::prefill);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], "the softcap is ignored");
}

} // namespace
} // namespace attn
