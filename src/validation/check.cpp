#include "src/validation/check.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <vector>

#include "src/model/errors.h"

namespace attn {

Tolerance tolerance_for(DType t) {
  // fp32: kernels accumulate in fp32 on fp32 inputs; errors are a few ulps of the dot products.
  // fp16/bf16: the output itself is rounded to 11 / 8 significant bits (relative 4.9e-4 /
  // 3.9e-3), and fast kernels round probabilities to the input dtype before the PV product.
  switch (t) {
  case DType::f16:
    return {/*atol=*/1e-3, /*rtol=*/4e-3, /*norm_rel=*/2e-3, /*lse_atol=*/2e-3};
  case DType::bf16:
    return {/*atol=*/8e-3, /*rtol=*/2e-2, /*norm_rel=*/1e-2, /*lse_atol=*/1e-2};
  default:
    return {/*atol=*/1e-5, /*rtol=*/1e-4, /*norm_rel=*/5e-5, /*lse_atol=*/1e-4};
  }
}

const char* verdict_name(ElementVerdict v) {
  switch (v) {
  case ElementVerdict::ok:
    return "ok";
  case ElementVerdict::mismatch:
    return "mismatch";
  case ElementVerdict::unwritten:
    return "unwritten";
  case ElementVerdict::nan:
    return "nan";
  case ElementVerdict::inf:
    return "inf";
  }
  return "?";
}

double element_size(const ReferenceResult& ref, std::size_t i) {
  return i < ref.out_size.size() && std::isfinite(ref.out_size[i]) ? ref.out_size[i] : 1.0;
}

namespace {

// The smallest positive value of an output dtype, its subnormals' spacing: rounding a result
// into the subnormals errs by up to half of it, however small the values it averages.
constexpr double smallest_step(DType t) {
  switch (t) {
  case DType::f16:
    return 0x1p-24;
  case DType::bf16:
    return 0x1p-133;
  default:
    return 0x1p-149;
  }
}

// Whether `got` (finite) is wrong against `want` for an element averaging values of `size`:
// outside atol * size + rtol * |want| + the output dtype's smallest step, or against a
// non-finite expectation (a bug model's output that read a NaN slot), which |got - want| > bound
// would pass.
bool outside_tolerance(double got, double want, const Tolerance& tol, double size, double step) {
  return !std::isfinite(want) ||
         std::abs(got - want) > tol.atol * size + tol.rtol * std::abs(want) + step;
}

} // namespace

ElementVerdict judge_element(const HostTensor& out, std::size_t i, double want,
                             const Tolerance& tol, double size) {
  if (is_poison(out, i)) {
    return ElementVerdict::unwritten;
  }
  const double got = out.get(i);
  if (!std::isfinite(got)) {
    return std::isnan(got) ? ElementVerdict::nan : ElementVerdict::inf;
  }
  return outside_tolerance(got, want, tol, size, smallest_step(out.dtype))
             ? ElementVerdict::mismatch
             : ElementVerdict::ok;
}

double lse_bound(const Tolerance& tol, double want) {
  return tol.lse_atol + kLseRelative * std::abs(want);
}

ElementVerdict judge_lse(float got, double want, const Tolerance& tol) {
  if (is_poison(got)) {
    return ElementVerdict::unwritten;
  }
  if (std::isnan(got)) {
    return ElementVerdict::nan;
  }
  if (std::isinf(want) || std::isinf(got)) {
    // -inf is right only where the reference says the row sees no key.
    return std::isinf(want) && std::isinf(got) && (want < 0) == (got < 0)
               ? ElementVerdict::ok
               : ElementVerdict::mismatch;
  }
  return std::abs(got - want) > lse_bound(tol, want) ? ElementVerdict::mismatch
                                                     : ElementVerdict::ok;
}

namespace {

// The loops below index by the reference's shape; a smaller output would be read past its end.
void require_shapes(const HostTensor& out, const std::vector<float>* lse,
                    const ReferenceResult& ref) {
  const int64_t want_out = int64_t(ref.rows) * ref.heads * ref.head_dim;
  if (int64_t(out.data.size()) != want_out * int64_t(dtype_size(out.dtype))) {
    throw InputError("out holds " + std::to_string(out.data.size() / dtype_size(out.dtype)) +
                     " elements, expected rows x heads x head_dim = " + std::to_string(want_out));
  }
  if (lse && int64_t(lse->size()) != int64_t(ref.rows) * ref.heads) {
    throw InputError("lse holds " + std::to_string(lse->size()) + " elements, expected rows x heads = " +
                     std::to_string(int64_t(ref.rows) * ref.heads));
  }
}

} // namespace

namespace {

// How check_output reads the output's elements: its raw bits, the poison test on them, their
// value, and a float rounded into the output's dtype, with the dtype fixed at compile time. Read
// through HostTensor::get and is_poison, with frexp and ldexp for the half-ulp counts, the check
// took a third of verify's CPU time on the CPU backend, more than the kernels it checks.
template <class Raw, Raw kPoison, DType kType, int kBits, int kLowest> struct OutElements {
  const Raw* raw;
  static constexpr bool kCountsUlps = kBits > 0; // the 16-bit dtypes
  static constexpr int kUlpBits = kBits;         // the significand's explicit bits
  static constexpr int kUlpLowest = kLowest;     // the exponent of the smallest normal
  [[nodiscard]] bool poisoned(std::size_t i) const { return raw[i] == kPoison; }
  // got[k] = element i + k as float, k < n.
  void values(std::size_t i, int n, float* got) const {
    if constexpr (kType == DType::f16) {
      halves_to_floats(raw + i, got, std::size_t(n));
    } else {
      for (int k = 0; k < n; ++k) {
        got[k] = load_as_float(kType, raw, i + std::size_t(k));
      }
    }
  }
  // best[k] = want[k] rounded to float, then into the dtype (`bits`: n scratch halves).
  void rounded(const double* want, int n, float* best, uint16_t* bits) const {
    if constexpr (kType == DType::f16) {
      doubles_to_halves(want, bits, std::size_t(n));
      halves_to_floats(bits, best, std::size_t(n));
    } else {
      for (int k = 0; k < n; ++k) {
        best[k] = round_to(kType, float(want[k]));
      }
    }
  }
  [[nodiscard]] static constexpr double step() { return smallest_step(kType); }
};
// Any other dtype, element by element (an output is fp32, fp16 or bf16: Problem::dtype).
struct AnyElements {
  const HostTensor* t;
  static constexpr bool kCountsUlps = false;
  static constexpr int kUlpBits = 0;
  static constexpr int kUlpLowest = 0;
  [[nodiscard]] bool poisoned(std::size_t i) const { return is_poison(*t, i); }
  void values(std::size_t i, int n, float* got) const {
    for (int k = 0; k < n; ++k) {
      got[k] = t->get(i + std::size_t(k));
    }
  }
  void rounded(const double* want, int n, float* best, uint16_t* /*bits*/) const {
    for (int k = 0; k < n; ++k) {
      best[k] = round_to(t->dtype, float(want[k]));
    }
  }
  [[nodiscard]] double step() const { return smallest_step(t->dtype); }
};
using F32Elements = OutElements<uint32_t, kPoisonF32, DType::f32, 0, 0>;
using F16Elements = OutElements<uint16_t, kPoisonF16, DType::f16, 10, -14>;
using BF16Elements = OutElements<uint16_t, kPoisonBF16, DType::bf16, 7, -126>;

// 0.55 of the ulp of a 16-bit dtype with `bits` explicit significand bits and smallest normal
// exponent `lowest` at `want` (its subnormal spacing below that): 0.55 * 2^(max(e - 1, lowest) -
// bits), where want = m * 2^e with m in [0.5, 1) (frexp's e), read from the double's exponent
// field; the rare infinity or NaN goes through frexp and ldexp.
double half_ulp_at(double want, int bits, int lowest) {
  const auto u = std::bit_cast<uint64_t>(want);
  const int field = int((u >> 52) & 0x7ff);
  if (field == 0x7ff) {
    int ex = 0;
    (void)std::frexp(want, &ex);
    return 0.55 * std::ldexp(1.0, std::max(ex - 1, lowest) - bits);
  }
  // A double subnormal lies far below any 16-bit dtype's smallest normal: e - 1 < lowest.
  const int ex = field == 0 ? lowest : field - 1022;
  const int k = std::max(ex - 1, lowest) - bits; // within a double's normal exponents
  return 0.55 * std::bit_cast<double>(uint64_t(k + 1023) << 52);
}

// The sums check_output keeps over the elements.
struct CheckSums {
  double err2 = 0.0;
  double ref2 = 0.0;
  double floor2 = 0.0; // (round(ref) - ref)^2 summed
};

// One (row, head) pair's output values and rounded reference, as floats, for check_pair.
struct PairBuffers {
  explicit PairBuffers(int head_dim)
      : got(std::size_t(head_dim)), best(std::size_t(head_dim)), bits(std::size_t(head_dim)) {}
  std::vector<float> got;
  std::vector<float> best;
  std::vector<uint16_t> bits;
};

void note_problem(CheckReport& rep, int row, int head, int dim, double got, double want,
                  ElementVerdict v) {
  if (rep.first.size() < std::size_t(kMaxListedMismatches)) {
    rep.first.push_back({row, head, dim, got, want, verdict_name(v)});
  }
}

// check_output's running figures over the written, finite elements, added one element at a time
// in index order: both loops below keep them in this local copy and store it back after the pair.
template <class Out> struct RunningFigures {
  RunningFigures(const CheckReport& rep, const CheckSums& sums)
      : err2(sums.err2), ref2(sums.ref2), floor2(sums.floor2), max_abs(rep.max_abs_err),
        short_by(rep.short_by_half_ulp), long_by(rep.long_by_half_ulp) {}
  // `best`: want rounded into the output's dtype.
  [[gnu::always_inline]] void add(double got, double want, double best) {
    const double e = std::abs(got - want);
    if constexpr (Out::kCountsUlps) {
      // Without branches: which side of the half ulp a right answer falls on is a coin toss,
      // which a branch predictor loses half the time.
      const double half_ulp = half_ulp_at(want, Out::kUlpBits, Out::kUlpLowest);
      const bool short_of = std::abs(got) < std::abs(want) - half_ulp && got * want >= 0.0;
      const bool long_of = std::abs(got) > std::abs(want) + half_ulp;
      short_by += int64_t(want != 0.0 && short_of);
      long_by += int64_t(want != 0.0 && !short_of && long_of);
    }
    err2 += e * e;
    ref2 += want * want;
    // (past the dtype's range no answer is finite: nonfinite)
    floor2 += std::isfinite(best) ? (best - want) * (best - want) : 0.0;
    max_abs = std::max(max_abs, e);
  }
  void store(CheckReport& rep, CheckSums& sums) const {
    sums.err2 = err2;
    sums.ref2 = ref2;
    sums.floor2 = floor2;
    rep.max_abs_err = max_abs;
    rep.short_by_half_ulp = short_by;
    rep.long_by_half_ulp = long_by;
  }
  double err2;
  double ref2;
  double floor2;
  double max_abs;
  int64_t short_by;
  int64_t long_by;
};

// The figures of one (row, head) pair (`got`, `best`: the pair's values from buf), with no call
// in its loop, so that they stay in registers (the SysV ABI saves no floating-point register
// across a call); false, with `rep` and `sums` untouched, where an element is unwritten, not
// finite or outside the tolerance: check_pair then goes through the pair again and notes them.
template <class Out>
bool check_clean_pair(const Out& out, const ReferenceResult& ref, const Tolerance& tol,
                      std::size_t base, const PairBuffers& buf, CheckReport& rep, CheckSums& sums) {
  const int D = ref.head_dim;
  const double* want_at = ref.out.data() + base;
  const double step = out.step();
  RunningFigures<Out> run(rep, sums);
  bool clean = true;
  for (int d = 0; d < D; ++d) {
    const std::size_t i = base + std::size_t(d);
    const double want = want_at[d];
    const double got = buf.got[std::size_t(d)];
    clean &= !out.poisoned(i) & std::isfinite(got) &
             !outside_tolerance(got, want, tol, element_size(ref, i), step);
    run.add(got, want, buf.best[std::size_t(d)]);
  }
  if (!clean) {
    return false;
  }
  run.store(rep, sums);
  rep.checked += D;
  return true;
}

// The elements of one (row, head) pair: judge_element's verdict for each, and the figures. The
// pair's output values and its reference rounded into the output's dtype are converted for the
// whole pair at once, and a pair with nothing to note takes check_clean_pair's loop. Element by
// element, through fp16's conversions in software one at a time, the check had taken a sixth of
// verify's CPU time on the CPU backend: 15.5 ns an fp16 element against 7.8 now (bf16 8.1 and
// 8.2, fp32 5.4 and 5.0; a 2-core Zen 3 VM, the fastest of seven runs over 262144 elements).
template <class Out>
void check_pair(const Out& out, const ReferenceResult& ref, const Tolerance& tol, int r, int h,
                CheckReport& rep, CheckSums& sums, PairBuffers& buf) {
  const int D = ref.head_dim;
  const std::size_t base = (std::size_t(r) * ref.heads + h) * D;
  out.values(base, D, buf.got.data());
  out.rounded(ref.out.data() + base, D, buf.best.data(), buf.bits.data());
  if (check_clean_pair(out, ref, tol, base, buf, rep, sums)) {
    return;
  }
  RunningFigures<Out> run(rep, sums);
  for (int d = 0; d < D; ++d) {
    const std::size_t i = base + d;
    const double want = ref.out[i];
    ++rep.checked;
    if (out.poisoned(i)) {
      ++rep.unwritten;
      note_problem(rep, r, h, d, std::nan(""), want, ElementVerdict::unwritten);
      continue;
    }
    const double got = buf.got[std::size_t(d)];
    if (!std::isfinite(got)) {
      ++rep.nonfinite;
      note_problem(rep, r, h, d, got, want,
                   std::isnan(got) ? ElementVerdict::nan : ElementVerdict::inf);
      continue;
    }
    run.add(got, want, buf.best[std::size_t(d)]);
    if (outside_tolerance(got, want, tol, element_size(ref, i), out.step())) {
      ++rep.bad;
      note_problem(rep, r, h, d, got, want, ElementVerdict::mismatch);
    }
  }
  run.store(rep, sums);
}

void check_lse(const std::vector<float>& lse, const ReferenceResult& ref, const Tolerance& tol,
               int r, int h, CheckReport& rep) {
  const std::size_t i = std::size_t(r) * ref.heads + h;
  const float g = lse[i];
  const double want = ref.lse[i];
  const ElementVerdict v = judge_lse(g, want, tol);
  if (v == ElementVerdict::unwritten) {
    ++rep.unwritten;
  }
  if (v != ElementVerdict::unwritten && !std::isnan(g)) {
    // -inf against a finite value (or the reverse) is an infinite error, not none.
    double e = 0.0;
    if (std::isinf(want) || std::isinf(g)) {
      e = v == ElementVerdict::ok ? 0.0 : std::numeric_limits<double>::infinity();
    } else {
      e = std::abs(double(g) - want);
    }
    rep.max_lse_err = std::max(rep.max_lse_err, e);
  }
  if (v != ElementVerdict::ok) {
    ++rep.lse_bad;
    note_problem(rep, r, h, -1, v == ElementVerdict::unwritten ? std::nan("") : double(g), want, v);
  }
}

template <class Out>
void check_rows(const Out& out, const std::vector<float>* lse, const ReferenceResult& ref,
                const Tolerance& tol, CheckReport& rep, CheckSums& sums) {
  PairBuffers buf(ref.head_dim);
  for (int r = 0; r < ref.rows; ++r) {
    if (!ref.computed[std::size_t(r)]) {
      continue;
    }
    for (int h = 0; h < ref.heads; ++h) {
      check_pair(out, ref, tol, r, h, rep, sums, buf);
      if (lse) {
        check_lse(*lse, ref, tol, r, h, rep);
      }
    }
  }
}

} // namespace

CheckReport check_output(const HostTensor& out, const std::vector<float>* lse,
                         const ReferenceResult& ref, const Tolerance& tol) {
  require_shapes(out, lse, ref);
  CheckReport rep;
  rep.lse_checked = lse != nullptr;
  CheckSums sums;
  switch (out.dtype) {
  case DType::f32:
    check_rows(F32Elements{static_cast<const uint32_t*>(out.raw())}, lse, ref, tol, rep, sums);
    break;
  case DType::f16:
    check_rows(F16Elements{static_cast<const uint16_t*>(out.raw())}, lse, ref, tol, rep, sums);
    break;
  case DType::bf16:
    check_rows(BF16Elements{static_cast<const uint16_t*>(out.raw())}, lse, ref, tol, rep, sums);
    break;
  default:
    check_rows(AnyElements{&out}, lse, ref, tol, rep, sums);
  }
  rep.norm_rel_err = sums.ref2 > 0 ? std::sqrt(sums.err2 / sums.ref2) : std::sqrt(sums.err2);
  rep.rounding_floor = sums.ref2 > 0 ? std::sqrt(sums.floor2 / sums.ref2) : 0.0;
  // A kernel rounds its fp32 result, not the exact one: up to about twice the floor.
  rep.norm_bound = std::max(tol.norm_rel, 2.0 * rep.rounding_floor);
  rep.pass = rep.bad == 0 && rep.unwritten == 0 && rep.nonfinite == 0 && rep.lse_bad == 0 &&
             rep.norm_rel_err <= rep.norm_bound;
  return rep;
}

std::vector<WrongPair> wrong_pairs(const HostTensor& out, const std::vector<float>* lse,
                                   const ReferenceResult& ref, const Tolerance& tol) {
  require_shapes(out, lse, ref);
  std::vector<WrongPair> wrong;
  const int H = ref.heads;
  const int D = ref.head_dim;
  for (int r = 0; r < ref.rows; ++r) {
    if (!ref.computed[std::size_t(r)]) {
      continue;
    }
    for (int h = 0; h < H; ++h) {
      WrongPair w{r, h, false, false};
      for (int d = 0; d < D && !w.out_wrong; ++d) {
        const std::size_t i = (std::size_t(r) * H + h) * D + d;
        w.out_wrong =
            judge_element(out, i, ref.out[i], tol, element_size(ref, i)) != ElementVerdict::ok;
      }
      if (lse) {
        const std::size_t i = std::size_t(r) * H + h;
        w.lse_wrong = judge_lse((*lse)[i], ref.lse[i], tol) != ElementVerdict::ok;
      }
      if (w.out_wrong || w.lse_wrong) {
        wrong.push_back(w);
      }
    }
  }
  return wrong;
}

std::string CheckReport::summary() const {
  char lse_part[64];
  if (lse_checked) {
    std::snprintf(lse_part, sizeof lse_part, "max_lse_err=%.3e", max_lse_err);
  } else {
    std::snprintf(lse_part, sizeof lse_part, "lse not checked");
  }
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "norm_rel_err=%.3e max_abs_err=%.3e %s checked=%lld bad=%lld "
                "unwritten=%lld nonfinite=%lld lse_bad=%lld",
                norm_rel_err, max_abs_err, lse_part, (long long)checked, (long long)bad,
                (long long)unwritten, (long long)nonfinite, (long long)lse_bad);
  std::string line = buf;
  if (unwritten + nonfinite > 0) {
    // The errors leave those elements out: an output all NaN would read as an error of 0.
    char over[120];
    std::snprintf(over, sizeof over, " (the errors are over the %lld written, finite elements)",
                  (long long)(checked - unwritten - nonfinite));
    line += over;
  }
  if (norm_bound > 0 && rounding_floor * 2.0 >= norm_bound) {
    // The bound the tolerance gives was below what rounding into the output dtype leaves.
    char why[200];
    std::snprintf(why, sizeof why,
                  " (normwise bound %.3e: twice the %.3e the output dtype's rounding of the "
                  "reference leaves, its values being in the dtype's subnormals)",
                  norm_bound, rounding_floor);
    line += why;
  }
  if (!inputs_written.empty()) {
    line += " wrote into its inputs: " + inputs_written;
  }
  return overrun.empty() ? line : line + " wrote past the end: " + overrun;
}

std::string CheckReport::details() const {
  std::ostringstream s;
  for (const auto& m : first) {
    char buf[200];
    if (m.dim >= 0) {
      std::snprintf(buf, sizeof buf, "  out[row=%d, head=%d, dim=%d] got %.6g want %.6g (%s)\n",
                    m.row, m.head, m.dim, m.got, m.want, m.what.c_str());
    } else {
      std::snprintf(buf, sizeof buf, "  lse[row=%d, head=%d] got %.9g want %.9g (%s)\n", m.row,
                    m.head, m.got, m.want, m.what.c_str());
    }
    s << buf;
  }
  return s.str();
}

} // namespace attn
