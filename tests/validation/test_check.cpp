// Tests of the output checker: exact results pass; unwritten (poisoned) elements, NaN, Inf,
// element and normwise errors and lse mismatches fail, and the listing stops after a handful.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "src/model/errors.h"
#include "src/model/problem.h"
#include "src/model/problem_gen.h"
#include "src/model/rng.h"
#include "src/validation/check.h"

using namespace attn;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Problem small_problem(DType t, uint64_t seed = 1) {
  AttnParams p;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = 16;
  p.block_size = 8;
  p.dtype = t;
  GenOptions o;
  o.seed = seed;
  // Sequence 1 has no keys: its rows have out 0 and lse -inf.
  return make_prefill_problem(p, {3, 2, 4}, {9, 0, 20}, o);
}

// The reference rounded to the output dtype, as a perfect kernel would write it.
HostTensor exact_out(const ReferenceResult& ref, DType t) {
  HostTensor out(t, {ref.rows, ref.heads, ref.head_dim});
  poison(out);
  for (std::size_t i = 0; i < ref.out.size(); ++i) {
    if (ref.computed[i / std::size_t(ref.heads * ref.head_dim)]) {
      out.set(i, float(ref.out[i]));
    }
  }
  return out;
}

std::vector<float> exact_lse(const ReferenceResult& ref) {
  std::vector<float> lse(ref.lse.size());
  poison(lse);
  for (std::size_t i = 0; i < ref.lse.size(); ++i) {
    if (ref.computed[i / std::size_t(ref.heads)]) {
      lse[i] = float(ref.lse[i]);
    }
  }
  return lse;
}

struct Fixture {
  Problem pr;
  ReferenceResult ref;
  HostTensor out;
  std::vector<float> lse;
  Tolerance tol;
  explicit Fixture(DType t, uint64_t seed = 1)
      : pr(small_problem(t, seed)), ref(reference_attention(pr)), out(exact_out(ref, t)),
        lse(exact_lse(ref)), tol(tolerance_for(t)) {}
  std::size_t index(int row, int head, int dim) const {
    return (std::size_t(row) * ref.heads + head) * ref.head_dim + dim;
  }
  CheckReport check() const { return check_output(out, &lse, ref, tol); }
};

TEST(Check, ExactResultsPassInEveryDtype) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const Fixture f(t);
    const CheckReport r = f.check();
    EXPECT_TRUE(r.pass) << dtype_name(t) << " " << r.summary() << "\n" << r.details();
    EXPECT_EQ(r.checked, int64_t(f.ref.out.size()));
    EXPECT_EQ(r.bad + r.unwritten + r.nonfinite + r.lse_bad, 0);
    EXPECT_TRUE(r.first.empty());
    EXPECT_LT(r.norm_rel_err, f.tol.norm_rel);
    // Without lse the output alone is judged.
    EXPECT_TRUE(check_output(f.out, nullptr, f.ref, f.tol).pass) << dtype_name(t);
  }
  // fp32 storage of the double reference is within float rounding.
  const CheckReport r = Fixture(DType::f32).check();
  EXPECT_LT(r.norm_rel_err, 1e-7);
  EXPECT_LT(r.max_lse_err, 1e-5);
}

TEST(Check, UnwrittenElementsFail) {
  Fixture f(DType::f16);
  const std::size_t i = f.index(5, 2, 7);
  f.out.data[i * 2] = std::byte{0x5a}; // restore the poison pattern 0x7d5a
  f.out.data[i * 2 + 1] = std::byte{0x7d};
  ASSERT_TRUE(is_poison(f.out, i));
  const CheckReport r = f.check();
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.unwritten, 1);
  EXPECT_EQ(r.bad, 0);
  EXPECT_EQ(r.nonfinite, 0);
  ASSERT_EQ(r.first.size(), 1u);
  EXPECT_EQ(r.first[0].what, "unwritten");
  EXPECT_EQ(r.first[0].row, 5);
  EXPECT_EQ(r.first[0].head, 2);
  EXPECT_EQ(r.first[0].dim, 7);
  // A wholly unwritten output fails with every element counted.
  Fixture g(DType::bf16);
  poison(g.out);
  const CheckReport all = g.check();
  EXPECT_FALSE(all.pass);
  EXPECT_EQ(all.unwritten, all.checked);
}

TEST(Check, ComputedNanAndInfFailAndAreToldApartFromPoison) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    Fixture f(t);
    f.out.set(f.index(0, 1, 3), std::nanf(""));
    f.out.set(f.index(6, 3, 0), std::numeric_limits<float>::infinity());
    f.out.set(f.index(7, 0, 15), -std::numeric_limits<float>::infinity());
    const CheckReport r = f.check();
    EXPECT_FALSE(r.pass) << dtype_name(t);
    EXPECT_EQ(r.nonfinite, 3) << dtype_name(t);
    EXPECT_EQ(r.unwritten, 0) << dtype_name(t) << ": a computed NaN is not the poison";
    ASSERT_EQ(r.first.size(), 3u);
    EXPECT_EQ(r.first[0].what, "nan");
    EXPECT_EQ(r.first[1].what, "inf");
    EXPECT_EQ(r.first[2].what, "inf");
    EXPECT_FALSE(std::isnan(r.norm_rel_err)) << "non-finite values stay out of the norm";
    // And the summary says so, so that an output all NaN does not read as an error of 0.
    EXPECT_NE(r.summary().find(" (the errors are over the " + std::to_string(r.checked - 3) +
                               " written, finite elements)"),
              std::string::npos)
        << r.summary();
  }
  Fixture clean(DType::f16);
  EXPECT_EQ(clean.check().summary().find("written, finite"), std::string::npos);
}

TEST(Check, ElementErrorsBeyondAtolPlusRtolFail) {
  Fixture f(DType::f32);
  // Row 5 is the first of sequence 2 (rows 3 and 4 see no key, and must be exactly 0).
  const std::size_t i = f.index(5, 1, 9);
  const double want = f.ref.out[i];
  const double limit = f.tol.atol * element_size(f.ref, i) + f.tol.rtol * std::abs(want);
  f.out.set(i, float(want + 0.9 * limit));
  CheckReport r = f.check();
  EXPECT_TRUE(r.pass) << r.summary();
  EXPECT_EQ(r.bad, 0);
  EXPECT_NEAR(r.max_abs_err, 0.9 * limit, 1e-7);

  f.out.set(i, float(want - 1.2 * limit));
  r = f.check();
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.bad, 1);
  ASSERT_EQ(r.first.size(), 1u);
  EXPECT_EQ(r.first[0].what, "mismatch");
  EXPECT_EQ(r.first[0].row, 5);
  EXPECT_EQ(r.first[0].head, 1);
  EXPECT_EQ(r.first[0].dim, 9);
  EXPECT_NEAR(r.first[0].want, want, 0.0);
  EXPECT_NEAR(r.first[0].got, want - 1.2 * limit, 1e-7);
  // details() lists it with its indices, summary() counts it.
  EXPECT_NE(r.details().find("out[row=5, head=1, dim=9]"), std::string::npos) << r.details();
  EXPECT_NE(r.summary().find("bad=1"), std::string::npos) << r.summary();
}

TEST(Check, EmptyRowsMustBeZero) {
  Fixture f(DType::f16);
  // Rows 3 and 4 belong to the sequence with no keys: out must be 0.
  f.out.set(f.index(3, 0, 0), 0.01f);
  const CheckReport r = f.check();
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.bad, 1);
}

TEST(Check, NormwiseErrorFailsEvenWhenEveryElementIsInside) {
  // Every element off by 90% of its own allowance: no single element fails, but the normwise
  // error (about 0.9 * (atol * ||size|| / ||ref|| + rtol)) is beyond norm_rel.
  Fixture f(DType::f32);
  for (std::size_t i = 0; i < f.ref.out.size(); ++i) {
    const double want = f.ref.out[i];
    const double limit = f.tol.atol * element_size(f.ref, i) + f.tol.rtol * std::abs(want);
    f.out.set(i, float(want + (i % 2 ? 0.9 : -0.9) * limit));
  }
  const CheckReport r = f.check();
  EXPECT_EQ(r.bad, 0) << r.summary();
  EXPECT_EQ(r.unwritten + r.nonfinite + r.lse_bad, 0);
  EXPECT_GT(r.norm_rel_err, f.tol.norm_rel);
  EXPECT_FALSE(r.pass);
}

// Outputs in the output dtype's subnormals (a tiny v_scale) keep few bits: the reference rounded
// into the dtype is further from itself, normwise, than the tolerance allows. That answer, the
// best there is, passes (the bound becomes twice the rounding's error, and the report says so);
// one a few subnormal steps off in every element still fails.
TEST(Check, OutputsInTheSubnormalsAreJudgedAgainstTheirOwnRounding) {
  for (DType t : {DType::f16, DType::bf16, DType::f32}) {
    Fixture f(t);
    const double tiny = t == DType::f16 ? 1e-6 : t == DType::bf16 ? 1e-39 : 1e-43;
    const double step = t == DType::f16 ? 0x1p-24 : t == DType::bf16 ? 0x1p-133 : 0x1p-149;
    for (double& x : f.ref.out) {
      x *= tiny;
    }
    for (double& x : f.ref.out_size) {
      x *= tiny;
    }
    f.out = exact_out(f.ref, t);
    const CheckReport r = check_output(f.out, nullptr, f.ref, f.tol);
    EXPECT_GT(2 * r.rounding_floor, f.tol.norm_rel) << dtype_name(t);
    EXPECT_GT(r.norm_rel_err, f.tol.norm_rel) << dtype_name(t) << " " << r.summary();
    EXPECT_TRUE(r.pass) << dtype_name(t) << " " << r.summary();
    EXPECT_NE(r.summary().find("the output dtype's rounding of the reference leaves"),
              std::string::npos)
        << r.summary();
    for (std::size_t i = 0; i < f.ref.out.size(); ++i) {
      if (f.ref.computed[i / std::size_t(f.ref.heads * f.ref.head_dim)]) {
        f.out.set(i, float(f.ref.out[i] + 4 * step));
      }
    }
    const CheckReport off = check_output(f.out, nullptr, f.ref, f.tol);
    EXPECT_FALSE(off.pass) << dtype_name(t) << " " << off.summary();
  }
  // In the normal range the tolerance's own bound stands.
  const CheckReport normal = Fixture(DType::f16).check();
  EXPECT_EQ(normal.norm_bound, tolerance_for(DType::f16).norm_rel);
  EXPECT_EQ(normal.summary().find("rounding of the reference"), std::string::npos);
}

TEST(Check, LseMismatchesFail) {
  Fixture f(DType::f32);
  const std::size_t finite = std::size_t(0) * 4 + 1; // row 0, head 1: has keys
  const std::size_t empty = std::size_t(3) * 4 + 2;  // row 3, head 2: no keys
  ASSERT_TRUE(std::isfinite(f.ref.lse[finite]));
  ASSERT_EQ(f.ref.lse[empty], -kInf);

  auto run = [&](std::size_t at, float value) {
    Fixture g(DType::f32);
    g.lse[at] = value;
    return g.check();
  };
  const float ref_lse = float(f.ref.lse[finite]);
  EXPECT_TRUE(run(finite, ref_lse + float(0.5 * f.tol.lse_atol)).pass);
  CheckReport r = run(finite, ref_lse + float(2.0 * f.tol.lse_atol));
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.lse_bad, 1);
  ASSERT_EQ(r.first.size(), 1u);
  EXPECT_EQ(r.first[0].dim, -1);
  EXPECT_NE(r.details().find("lse[row=0, head=1]"), std::string::npos) << r.details();
  // -inf where the reference is finite, and a finite value where it is -inf.
  r = run(finite, -std::numeric_limits<float>::infinity());
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.lse_bad, 1);
  r = run(empty, 0.0f);
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.lse_bad, 1);
  r = run(empty, -1e30f);
  EXPECT_FALSE(r.pass) << "a very negative finite lse is not -inf";
  r = run(empty, std::numeric_limits<float>::infinity());
  EXPECT_FALSE(r.pass);
  // NaN and poison.
  r = run(finite, std::nanf(""));
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.lse_bad, 1);
  EXPECT_EQ(r.first[0].what, "nan");
  r = run(empty, std::nanf(""));
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.first[0].what, "nan");
  std::vector<float> one(1);
  poison(one);
  r = run(finite, one[0]);
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.first[0].what, "unwritten");
}

// lse is fp32 at every dtype: above 2048 its spacing exceeds the fp32 lse_atol, and the bound
// grows with the value (kLseRelative) so that a correctly rounded lse of any size passes.
TEST(Check, LargeLseRoundedToFp32Passes) {
  const Tolerance tol = tolerance_for(DType::f32);
  for (double want : {1741.3086312345678, -2987.6543210987, 30000.123456789}) {
    const float rounded = float(want);
    EXPECT_EQ(judge_lse(rounded, want, tol), ElementVerdict::ok) << want;
    // One ulp is inside; a miss of 1e-3 relative is not.
    EXPECT_EQ(judge_lse(std::nextafter(rounded, 1e9f), want, tol), ElementVerdict::ok) << want;
    EXPECT_EQ(judge_lse(float(want * (1 + 1e-3)), want, tol), ElementVerdict::mismatch) << want;
  }
  // Small values keep the absolute bound.
  EXPECT_EQ(judge_lse(float(2.5 + 2 * tol.lse_atol), 2.5, tol), ElementVerdict::mismatch);
}

// An lse mismatch of a large value is printed with the digits that tell got from want: at six
// digits 1741.3086 and 1741.3123 would both read 1741.31.
TEST(Check, LseMismatchesArePrintedToNineDigits) {
  CheckReport r;
  r.first.push_back({2, 1, -1, 1741.30859375, 1741.3123456789, "mismatch"});
  r.first.push_back({0, 0, 3, 0.123456789, 0.5, "mismatch"});
  const std::string d = r.details();
  EXPECT_NE(d.find("lse[row=2, head=1] got 1741.30859 want 1741.31235 (mismatch)"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("out[row=0, head=0, dim=3] got 0.123457 want 0.5 (mismatch)"), std::string::npos)
      << d;
}

// A finite answer never matches a NaN or infinite expectation (a bug model's output that read a
// NaN slot): |got - NaN| > tol is false, which once passed it.
TEST(Check, AFiniteElementDoesNotMatchANanExpectation) {
  HostTensor out(DType::f32, {1, 1, 2});
  out.set(0, 0.5f);
  out.set(1, 0.0f);
  const Tolerance tol = tolerance_for(DType::f32);
  EXPECT_EQ(judge_element(out, 0, std::nan(""), tol), ElementVerdict::mismatch);
  EXPECT_EQ(judge_element(out, 1, kInf, tol), ElementVerdict::mismatch);
  EXPECT_EQ(judge_element(out, 0, 0.5, tol), ElementVerdict::ok);
}

TEST(Check, ListingStopsAfterTheFirstFew) {
  Fixture f(DType::f16);
  std::vector<std::size_t> spoiled;
  for (std::size_t i = 3; i < f.ref.out.size(); i += 37) {
    f.out.set(i, float(f.ref.out[i] + 1.0));
    spoiled.push_back(i);
  }
  ASSERT_GT(spoiled.size(), std::size_t(kMaxListedMismatches) + 5);
  const CheckReport r = f.check();
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.bad, int64_t(spoiled.size()));
  ASSERT_EQ(r.first.size(), std::size_t(kMaxListedMismatches));
  for (int k = 0; k < kMaxListedMismatches; ++k) { // the first ones, in index order
    const Mismatch& m = r.first[std::size_t(k)];
    EXPECT_EQ(f.index(m.row, m.head, m.dim), spoiled[std::size_t(k)]);
  }
  // details() prints exactly the listed ones.
  const std::string d = r.details();
  EXPECT_EQ(std::count(d.begin(), d.end(), '\n'), kMaxListedMismatches);
}

TEST(Check, OnlyTheRowsTheReferenceComputedAreJudged) {
  Problem pr = small_problem(DType::f16);
  ReferenceOptions o;
  o.rows = {1, 6};
  const ReferenceResult ref = reference_attention(pr, o);
  HostTensor out = exact_out(ref, DType::f16); // rows other than 1 and 6 stay poisoned
  std::vector<float> lse = exact_lse(ref);
  const CheckReport r = check_output(out, &lse, ref, tolerance_for(DType::f16));
  EXPECT_TRUE(r.pass) << r.summary();
  EXPECT_EQ(r.checked, 2 * 4 * 16);
}

TEST(Check, OutputsOfTheWrongSizeAreRejected) {
  Fixture f(DType::f32);
  const HostTensor short_out(DType::f32, {f.ref.rows - 1, f.ref.heads, f.ref.head_dim});
  EXPECT_THROW((void)check_output(short_out, nullptr, f.ref, f.tol), InputError);
  std::vector<float> short_lse(f.lse.begin(), f.lse.end() - 1);
  EXPECT_THROW((void)check_output(f.out, &short_lse, f.ref, f.tol), InputError);
}

TEST(Check, PoisonCoversExactlyTheAllocatedElements) {
  HostTensor none; // shape [] but no bytes: poisoning it writes nothing
  poison(none);
  EXPECT_TRUE(none.data.empty());
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    HostTensor x(t, {3, 5});
    poison(x);
    for (std::size_t i = 0; i < 15; ++i) {
      EXPECT_TRUE(is_poison(x, i)) << dtype_name(t);
      EXPECT_TRUE(std::isnan(x.get(i))) << dtype_name(t);
    }
    x.set(4, 0.0f);
    EXPECT_FALSE(is_poison(x, 4));
    x.set(4, std::nanf("")); // a computed NaN is a different pattern
    EXPECT_FALSE(is_poison(x, 4)) << dtype_name(t);
  }
}

TEST(Check, TolerancesAreOrderedByPrecision) {
  const Tolerance a = tolerance_for(DType::f32);
  const Tolerance b = tolerance_for(DType::f16);
  const Tolerance c = tolerance_for(DType::bf16);
  EXPECT_LT(a.atol, b.atol);
  EXPECT_LT(b.atol, c.atol);
  EXPECT_LT(a.rtol, b.rtol);
  EXPECT_LT(b.rtol, c.rtol);
  EXPECT_LT(a.norm_rel, b.norm_rel);
  EXPECT_LT(b.norm_rel, c.norm_rel);
  EXPECT_LT(a.lse_atol, b.lse_atol);
  EXPECT_LT(b.lse_atol, c.lse_atol);
  // SPEC.md guidance: fp32 far under 1e-3, fp16 about 2e-3, bf16 about 1e-2.
  EXPECT_LT(a.norm_rel, 1e-4);
  EXPECT_LE(b.norm_rel, 2e-3);
  EXPECT_LE(c.norm_rel, 1e-2);
  // Storing the exact answer in the dtype (relative 2^-11 / 2^-8 at worst) passes elementwise.
  EXPECT_GT(b.rtol, std::ldexp(1.0, -11));
  EXPECT_GT(c.rtol, std::ldexp(1.0, -8));
}

} // namespace

// atol is for values of size 1: where an element averages values of 1000, a correct fp32 kernel's
// rounding error is 1000 times larger while |ref| can be near 0 (cancellation), so the bound grows
// with the size the reference reports (sum_j p_j |v_j[d]|), and only above 1.
TEST(Check, AtolGrowsWithTheSizeOfTheValuesAveraged) {
  Problem pr = small_problem(DType::f32);
  for (std::size_t i = 0; i < std::size_t(pr.value_cache.numel()); ++i) {
    pr.value_cache.set(i, pr.value_cache.get(i) * 1000.0f);
  }
  const ReferenceResult ref = reference_attention(pr);
  const Tolerance tol = tolerance_for(DType::f32);
  // The element whose |ref| is smallest beside its size: where cancellation bites.
  std::size_t at = 0;
  double best = 0;
  for (std::size_t i = 0; i < ref.out.size(); ++i) {
    const double r = ref.out_size[i] / (std::abs(ref.out[i]) + 1e-30);
    if (ref.out_size[i] > 0 && r > best) {
      best = r;
      at = i;
    }
  }
  const double size = ref.out_size[at];
  ASSERT_GT(size, 100.0);
  ASSERT_LT(tol.rtol * std::abs(ref.out[at]), 0.1 * tol.atol * size);
  HostTensor out = exact_out(ref, DType::f32);
  const auto with_error = [&](double e) {
    HostTensor o = out;
    o.set(at, float(ref.out[at] + e));
    return o;
  };
  EXPECT_TRUE(check_output(with_error(0.5 * tol.atol * size), nullptr, ref, tol).pass);
  EXPECT_FALSE(check_output(with_error(2.0 * tol.atol * size), nullptr, ref, tol).pass);
  // Without the sizes (a reference that did not say), atol is taken as is.
  ReferenceResult bare = ref;
  bare.out_size.clear();
  EXPECT_FALSE(check_output(with_error(0.5 * tol.atol * size), nullptr, bare, tol).pass);
  // The size is sum_j p_j |v_j[d]|: row 0, head 0 (sequence 0: 9 keys, 3 query rows, causal, so
  // the row sees keys 0 to 6), dimension 3, summed directly.
  const Problem unit = small_problem(DType::f32);
  const ReferenceResult uref = reference_attention(unit);
  const int D = uref.head_dim;
  double direct = 0;
  {
    const AttnParams& a = unit.params;
    std::vector<double> s;
    double m = -INFINITY;
    for (int j = 0; j <= 6; ++j) {
      double dot = 0;
      for (int d = 0; d < D; ++d) {
        dot += double(unit.query.get(std::size_t(d))) *
               unit.key_cache.get(std::size_t(unit.key_index(0, 0, j, d)));
      }
      s.push_back(a.effective_scale() * dot);
      m = std::max(m, s.back());
    }
    double sum = 0;
    for (double& x : s) {
      x = std::exp(x - m);
      sum += x;
    }
    for (int j = 0; j <= 6; ++j) {
      direct += s[std::size_t(j)] / sum *
                std::abs(double(unit.value_cache.get(std::size_t(unit.value_index(0, 0, j, 3)))));
    }
  }
  EXPECT_NEAR(uref.out_size[3], direct, 1e-12);
}

// The other way: a KV head whose values are a thousand times smaller than the rest is judged a
// thousand times more finely. Before 2026-12-07 atol did not shrink below values of size 1, and
// those heads' query heads could come out all zero and pass in bf16 and fp16 (|0 - ref| under
// 8e-3), where a kernel that lost them (read the wrong head's scale, flushed them) is wrong.
TEST(Check, AtolShrinksWithTheSizeOfTheValuesAveraged) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    Problem pr = small_problem(t);
    const KvCacheGeometry g = pr.kv_geometry();
    for (int64_t blk = 0; blk < pr.num_blocks; ++blk) {
      for (int s = 0; s < pr.params.block_size; ++s) {
        for (int d = 0; d < pr.params.head_dim; ++d) {
          const auto i = std::size_t(g.value_index(blk, 1, s, d));
          pr.value_cache.set(i, pr.value_cache.get(i) * 1e-3f);
        }
      }
    }
    const ReferenceResult ref = reference_attention(pr);
    const Tolerance tol = tolerance_for(t);
    const HostTensor exact = exact_out(ref, t);
    EXPECT_TRUE(check_output(exact, nullptr, ref, tol).pass) << dtype_name(t);
    // Query heads 2 and 3 read KV head 1: written as 0, or each element off by twice its
    // allowance for values of this size, they fail; off by half of it, they pass.
    const auto small_heads = [&](auto&& value_of) {
      HostTensor o = exact;
      for (int r = 0; r < ref.rows; ++r) {
        for (int h = 2; h < 4; ++h) {
          for (int d = 0; d < ref.head_dim; ++d) {
            const std::size_t i = (std::size_t(r) * ref.heads + h) * ref.head_dim + d;
            if (ref.computed[std::size_t(r)] && ref.out_size[i] > 0) {
              o.set(i, float(value_of(i)));
            }
          }
        }
      }
      return check_output(o, nullptr, ref, tol);
    };
    const auto allowance = [&](std::size_t i) {
      return tol.atol * ref.out_size[i] + tol.rtol * std::abs(ref.out[i]);
    };
    const CheckReport zero = small_heads([](std::size_t) { return 0.0; });
    EXPECT_FALSE(zero.pass) << dtype_name(t) << " " << zero.summary();
    EXPECT_GT(zero.bad, 0) << dtype_name(t) << ": each zeroed element is wrong by itself";
    const CheckReport far =
        small_heads([&](std::size_t i) { return ref.out[i] + 2.0 * allowance(i); });
    EXPECT_GT(far.bad, 0) << dtype_name(t) << " " << far.summary();
    if (t == DType::f32) { // 16-bit outputs round half an allowance away
      const CheckReport near =
          small_heads([&](std::size_t i) { return ref.out[i] + 0.5 * allowance(i); });
      EXPECT_EQ(near.bad, 0) << near.summary();
    }
  }
}

// check_output's figures are those of judging each element in turn, bit for bit: the sums in
// element order, the half-ulp counts, the largest error, and the first problems listed in order,
// for pairs with nothing to note (its fast loop) and pairs holding an unwritten, a NaN, an
// infinite or a wrong element, in every output dtype.
TEST(Check, FiguresAreThoseOfEachElementInTurn) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    ReferenceResult ref;
    ref.rows = 5;
    ref.heads = 3;
    ref.head_dim = 40;
    ref.computed = {1, 1, 0, 1, 1};
    const std::size_t n = std::size_t(ref.rows) * ref.heads * ref.head_dim;
    Rng rng(11);
    HostTensor out(t, {ref.rows, ref.heads, ref.head_dim});
    poison(out);
    for (std::size_t i = 0; i < n; ++i) {
      const double want = rng.normal() * (i % 7 == 0 ? 1e-6 : 0.5);
      ref.out.push_back(want);
      ref.out_size.push_back(i % 5 == 0 ? 1e-3 : 1.0);
      if (i % 97 != 3) { // a few elements stay unwritten
        out.set(i, float(want * (1.0 + (t == DType::f32 ? 1e-6 : 1e-3) * rng.normal())));
      }
    }
    // Row 3, head 1 (every third element of it) and row 4, head 2 hold NaN, infinity and
    // far-off values.
    const auto at = [&](int r, int h, int d) {
      return (std::size_t(r) * ref.heads + h) * ref.head_dim + d;
    };
    out.set(at(3, 1, 0), std::numeric_limits<float>::quiet_NaN());
    out.set(at(3, 1, 3), std::numeric_limits<float>::infinity());
    out.set(at(3, 1, 6), 100.0f);
    out.set(at(4, 2, 39), -7.0f);
    ref.lse.assign(std::size_t(ref.rows) * ref.heads, 0.0);
    const Tolerance tol = tolerance_for(t);
    const CheckReport rep = check_output(out, nullptr, ref, tol);

    int64_t checked = 0;
    int64_t unwritten = 0;
    int64_t nonfinite = 0;
    int64_t bad = 0;
    int64_t short_by = 0;
    int64_t long_by = 0;
    double err2 = 0.0;
    double ref2 = 0.0;
    double floor2 = 0.0;
    double max_abs = 0.0;
    std::vector<std::size_t> listed;
    for (int r = 0; r < ref.rows; ++r) {
      if (!ref.computed[std::size_t(r)]) {
        continue;
      }
      for (int h = 0; h < ref.heads; ++h) {
        for (int d = 0; d < ref.head_dim; ++d) {
          const std::size_t i = at(r, h, d);
          const double want = ref.out[i];
          ++checked;
          const ElementVerdict v = judge_element(out, i, want, tol, element_size(ref, i));
          if (v != ElementVerdict::ok && listed.size() < std::size_t(kMaxListedMismatches)) {
            listed.push_back(i);
          }
          if (v == ElementVerdict::unwritten) {
            ++unwritten;
            continue;
          }
          const double got = out.get(i);
          if (!std::isfinite(got)) {
            ++nonfinite;
            continue;
          }
          bad += v == ElementVerdict::mismatch;
          const double e = std::abs(got - want);
          if (t != DType::f32 && want != 0.0) {
            int ex = 0;
            (void)std::frexp(want, &ex);
            const int lowest = t == DType::f16 ? -14 : -126;
            const int bits = t == DType::f16 ? 10 : 7;
            const double half_ulp = 0.55 * std::ldexp(1.0, std::max(ex - 1, lowest) - bits);
            if (std::abs(got) < std::abs(want) - half_ulp && got * want >= 0.0) {
              ++short_by;
            } else if (std::abs(got) > std::abs(want) + half_ulp) {
              ++long_by;
            }
          }
          err2 += e * e;
          ref2 += want * want;
          const double best = round_to(t, float(want));
          if (std::isfinite(best)) {
            floor2 += (best - want) * (best - want);
          }
          max_abs = std::max(max_abs, e);
        }
      }
    }
    const std::string what(dtype_name(t));
    EXPECT_EQ(rep.checked, checked) << what;
    EXPECT_EQ(rep.unwritten, unwritten) << what;
    EXPECT_EQ(rep.nonfinite, nonfinite) << what;
    EXPECT_EQ(rep.bad, bad) << what;
    EXPECT_GT(unwritten, 0) << what;
    EXPECT_EQ(nonfinite, 2) << what;
    EXPECT_GE(bad, 2) << what;
    EXPECT_LT(bad, 20) << what; // most pairs have nothing to note
    EXPECT_EQ(rep.short_by_half_ulp, short_by) << what;
    EXPECT_EQ(rep.long_by_half_ulp, long_by) << what;
    EXPECT_EQ(rep.max_abs_err, max_abs) << what;
    EXPECT_EQ(rep.norm_rel_err, std::sqrt(err2 / ref2)) << what;
    EXPECT_EQ(rep.rounding_floor, std::sqrt(floor2 / ref2)) << what;
    ASSERT_EQ(rep.first.size(), listed.size()) << what;
    for (std::size_t k = 0; k < listed.size(); ++k) {
      const std::size_t i = listed[k];
      const int r = int(i / std::size_t(ref.heads * ref.head_dim));
      const int h = int(i / std::size_t(ref.head_dim) % std::size_t(ref.heads));
      const int d = int(i % std::size_t(ref.head_dim));
      EXPECT_EQ(rep.first[k].row, r) << what << " " << k;
      EXPECT_EQ(rep.first[k].head, h) << what << " " << k;
      EXPECT_EQ(rep.first[k].dim, d) << what << " " << k;
    }
  }
}

// The counts of answers shorter and longer than the expectation by over 0.55 of the output
// dtype's ulp follow frexp's definition (check.h, CheckReport::short_by_half_ulp) across each
// 16-bit dtype's range: powers of two and their neighbours, the dtype's subnormals, a double
// subnormal, answers a little and far off either way, of the other sign, and past the range.
TEST(Check, HalfUlpCountsFollowFrexpAcrossTheRange) {
  for (DType t : {DType::f16, DType::bf16}) {
    const int bits = t == DType::f16 ? 10 : 7;
    const int lowest = t == DType::f16 ? -14 : -126;
    std::vector<double> wants = {4.9e-324, -1e-310, 70000.0, 3.0e38};
    for (int e = -140; e <= 20; e += 3) {
      for (double m : {1.0, 1.0 + 1e-9, 1.5, 1.999}) {
        wants.push_back(std::ldexp(m, e));
        wants.push_back(-std::ldexp(m, e));
      }
    }
    const double factors[] = {1.0, 1.0 - 1.0 / 512, 1.0 + 1.0 / 512, 0.5, 2.0, -1.0};
    ReferenceResult ref;
    ref.rows = 1;
    ref.heads = 1;
    ref.head_dim = int(wants.size() * std::size(factors));
    ref.computed = {1};
    ref.lse = {0.0};
    HostTensor out(t, {1, 1, ref.head_dim});
    int64_t want_short = 0;
    int64_t want_long = 0;
    std::size_t i = 0;
    for (double w : wants) {
      for (double f : factors) {
        out.set(i, float(w * f));
        ref.out.push_back(w);
        const double got = out.get(i);
        ++i;
        if (!std::isfinite(got) || w == 0.0) {
          continue;
        }
        int ex = 0;
        (void)std::frexp(w, &ex);
        const double half_ulp = 0.55 * std::ldexp(1.0, std::max(ex - 1, lowest) - bits);
        if (std::abs(got) < std::abs(w) - half_ulp && got * w >= 0.0) {
          ++want_short;
        } else if (std::abs(got) > std::abs(w) + half_ulp) {
          ++want_long;
        }
      }
    }
    const CheckReport rep = check_output(out, nullptr, ref, tolerance_for(t));
    EXPECT_EQ(rep.short_by_half_ulp, want_short) << dtype_name(t);
    EXPECT_EQ(rep.long_by_half_ulp, want_long) << dtype_name(t);
    EXPECT_GT(want_short, 0) << dtype_name(t);
    EXPECT_GT(want_long, 0) << dtype_name(t);
  }
}
