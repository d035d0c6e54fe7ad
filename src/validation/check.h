// Judging a computed attention output against the reference: per-dtype tolerances, poisoned
// (never written) elements, NaN/Inf, the normwise error and the first few mismatches.
#pragma once
#include <string>
#include <vector>

#include "reference/reference.h"
#include "src/model/problem.h"
#include "src/model/tensor.h"

namespace attn {

// An element passes when |got - ref| <= atol * size + rtol * |ref| + step, where size is the
// reference's out_size for the element (the values it averages, sum_j p_j |v_j[d]|) and step the
// output dtype's smallest positive value: a kernel's rounding error grows and shrinks with the
// values, and where they cancel |ref| is far below them, so atol is for values of size 1 and
// scales with them either way (a head whose values are a thousand times smaller is judged a
// thousand times more finely); step is the rounding of results in the dtype's subnormals. The
// whole output passes when every element does and ||got - ref|| / ||ref|| <= norm_rel. lse passes
// within lse_bound: lse_atol plus kLseRelative of its size. Values and their reasons are in
// README.md "Accuracy".
struct Tolerance {
  double atol;
  double rtol;
  double norm_rel;
  double lse_atol;
};
[[nodiscard]] Tolerance tolerance_for(DType t);

// lse is fp32 whatever the dtype, and above 2048 fp32's spacing (2.4e-4) exceeds the fp32
// lse_atol: 2^-21 of the value (four to eight fp32 ulps of it) is added to every dtype's bound, so
// that a correctly rounded lse of any size passes. Scores that large come with large scales or logits.
inline constexpr double kLseRelative = 0x1p-21;
[[nodiscard]] double lse_bound(const Tolerance& tol, double want);

struct Mismatch {
  int row = 0;
  int head = 0;
  int dim = -1; // -1: the lse of (row, head)
  double got = 0.0;
  double want = 0.0;
  std::string what; // "mismatch", "unwritten", "nan", "inf"
};

struct CheckReport {
  bool pass = true;
  bool lse_checked = true;   // false when no lse was given (the family does not write it)
  double norm_rel_err = 0.0; // ||got - ref|| / ||ref|| over the checked rows
  // ||round(ref) - ref|| / ||ref||: the normwise error of the reference itself rounded into the
  // output's dtype, the least any answer can have. Far below the tolerance's normwise bound for
  // values in the dtype's normal range; outputs in its subnormals (a tiny v_scale) lose bits, and
  // the bound becomes twice this (norm_bound), so that a correctly rounded answer can pass.
  double rounding_floor = 0.0;
  double norm_bound = 0.0; // the normwise bound the output was judged with
  double max_abs_err = 0.0;
  double max_lse_err = 0.0; // inf when an lse is infinite where the reference's is finite
  int64_t checked = 0;   // output elements compared
  int64_t bad = 0;       // elements outside atol + rtol|ref|
  int64_t unwritten = 0; // elements still holding the poison pattern
  int64_t nonfinite = 0; // NaN or Inf (other than the poison)
  int64_t lse_bad = 0;
  // What the kernel wrote past the end of out or lse (RunOutput::overrun): a failure whatever
  // the values; empty when nothing was.
  std::string overrun;
  // The inputs the kernel wrote into during the call ("the query, the key cache"; checked_run,
  // PreparedRun::input_digests): a failure whatever the values; empty when it wrote none.
  std::string inputs_written;
  // 16-bit outputs: elements more than 0.55 of the output dtype's ulp shorter in magnitude than
  // the reference, and longer. Rounded to nearest, neither happens beyond an fp32 kernel's own
  // error; truncated, about half the elements are short and none long.
  int64_t short_by_half_ulp = 0;
  int64_t long_by_half_ulp = 0;
  // Whether the outputs look truncated toward zero (SPEC.md judges the error only, so this is a
  // note, not a failure): at least 64 elements checked, a fifth of them short by half an ulp,
  // and at most one long for every 20 short.
  [[nodiscard]] bool rounds_toward_zero() const {
    return checked >= 64 && short_by_half_ulp * 5 >= checked &&
           long_by_half_ulp * 20 <= short_by_half_ulp;
  }
  std::vector<Mismatch> first; // the first few problems, in index order
  // "norm_rel_err=1.2e-04 max_abs_err=3.1e-03 max_lse_err=2.0e-05 checked=.. bad=0 ..."; "lse not
  // checked" in place of the lse figures when it was not.
  [[nodiscard]] std::string summary() const;
  // One line per listed mismatch: "  out[row=3, head=1, dim=17] got 0.51 want 0.49 (mismatch)".
  [[nodiscard]] std::string details() const;
};

inline constexpr int kMaxListedMismatches = 8;

// What one element is, judged against its reference value: fine, or the kind of mismatch
// (Mismatch::what).
enum class ElementVerdict { ok, mismatch, unwritten, nan, inf };
[[nodiscard]] const char* verdict_name(ElementVerdict v);
// Output element i of `out` against `want`, an element averaging values of `size` (atol scales
// with it; the diagnosis's comparisons with a mistake's output leave it at 1).
[[nodiscard]] ElementVerdict judge_element(const HostTensor& out, std::size_t i, double want,
                                           const Tolerance& tol, double size = 1.0);
// The size of the values reference element i averages (ReferenceResult::out_size), 1 when the
// reference did not say.
[[nodiscard]] double element_size(const ReferenceResult& ref, std::size_t i);
// One lse value against the reference's (natural log, -inf for a row that sees no key).
[[nodiscard]] ElementVerdict judge_lse(float got, double want, const Tolerance& tol);

// A (row, head) pair of the output and how it is wrong.
struct WrongPair {
  int row = 0;
  int head = 0;
  bool out_wrong = false; // an output element of the pair is wrong
  bool lse_wrong = false; // its lse is wrong (only when lse was given)
};
// Every pair of the computed rows with a wrong element, in row-major order.
[[nodiscard]] std::vector<WrongPair> wrong_pairs(const HostTensor& out,
                                                 const std::vector<float>* lse,
                                                 const ReferenceResult& ref, const Tolerance& tol);

// Compare `out` ([rows, heads, head_dim], the problem's dtype) and optionally `lse` ([rows, heads])
// with the reference, over the rows the reference computed. Throws InputError when out or lse
// does not hold exactly the reference's number of elements.
[[nodiscard]] CheckReport check_output(const HostTensor& out, const std::vector<float>* lse,
                                       const ReferenceResult& ref, const Tolerance& tol);

} // namespace attn
