#include "src/validation/check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

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

ElementVerdict judge_element(const HostTensor& out, std::size_t i, double want,
                             const Tolerance& tol, double size) {
  if (is_poison(out, i)) {
    return ElementVerdict::unwritten;
  }
  const double got = out.get(i);
  if (!std::isfinite(got)) {
    return std::isnan(got) ? ElementVerdict::nan : ElementVerdict::inf;
  }
  if (!std::isfinite(want)) {
    // A finite answer never matches a NaN or infinite expectation (a bug model's output that
    // read a NaN slot): |got - NaN| > tol is false, which would pass it.
    return ElementVerdict::mismatch;
  }
  const double bound = tol.atol * std::max(1.0, size) + tol.rtol * std::abs(want);
  return std::abs(got - want) > bound ? ElementVerdict::mismatch : ElementVerdict::ok;
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

CheckReport check_output(const HostTensor& out, const std::vector<float>* lse,
                         const ReferenceResult& ref, const Tolerance& tol) {
  require_shapes(out, lse, ref);
  CheckReport rep;
  rep.lse_checked = lse != nullptr;
  const int H = ref.heads;
  const int D = ref.head_dim;
  double err2 = 0.0;
  double ref2 = 0.0;
  double floor2 = 0.0;                // (round(ref) - ref)^2 summed
  HostTensor rounded(out.dtype, {1}); // one element of the output's dtype, to round into
  auto note = [&](int row, int head, int dim, double got, double want, ElementVerdict v) {
    if (rep.first.size() < std::size_t(kMaxListedMismatches)) {
      rep.first.push_back({row, head, dim, got, want, verdict_name(v)});
    }
  };
  for (int r = 0; r < ref.rows; ++r) {
    if (!ref.computed[std::size_t(r)]) {
      continue;
    }
    for (int h = 0; h < H; ++h) {
      for (int d = 0; d < D; ++d) {
        const std::size_t i = (std::size_t(r) * H + h) * D + d;
        const double want = ref.out[i];
        ++rep.checked;
        const ElementVerdict v = judge_element(out, i, want, tol, element_size(ref, i));
        if (v == ElementVerdict::unwritten) {
          ++rep.unwritten;
          note(r, h, d, std::nan(""), want, v);
          continue;
        }
        const double got = out.get(i);
        if (v == ElementVerdict::nan || v == ElementVerdict::inf) {
          ++rep.nonfinite;
          note(r, h, d, got, want, v);
          continue;
        }
        const double e = std::abs(got - want);
        if ((out.dtype == DType::f16 || out.dtype == DType::bf16) && want != 0.0) {
          // The output dtype's ulp at the reference value (fp16's subnormal spacing below 2^-14).
          int ex = 0;
          (void)std::frexp(want, &ex);
          const int bits = out.dtype == DType::f16 ? 10 : 7;
          const int lowest = out.dtype == DType::f16 ? -14 : -126;
          const double half_ulp = 0.55 * std::ldexp(1.0, std::max(ex - 1, lowest) - bits);
          if (std::abs(got) < std::abs(want) - half_ulp && got * want >= 0.0) {
            ++rep.short_by_half_ulp;
          } else if (std::abs(got) > std::abs(want) + half_ulp) {
            ++rep.long_by_half_ulp;
          }
        }
        err2 += e * e;
        ref2 += want * want;
        rounded.set(0, float(want));
        const double best = rounded.get(0);
        if (std::isfinite(best)) { // (past the dtype's range no answer is finite: nonfinite)
          floor2 += (best - want) * (best - want);
        }
        rep.max_abs_err = std::max(rep.max_abs_err, e);
        if (v == ElementVerdict::mismatch) {
          ++rep.bad;
          note(r, h, d, got, want, v);
        }
      }
      if (lse) {
        const std::size_t i = std::size_t(r) * H + h;
        const float g = (*lse)[i];
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
          note(r, h, -1, v == ElementVerdict::unwritten ? std::nan("") : double(g), want, v);
        }
      }
    }
  }
  rep.norm_rel_err = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  rep.rounding_floor = ref2 > 0 ? std::sqrt(floor2 / ref2) : 0.0;
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
  if (norm_bound > 0 && rounding_floor * 2.0 >= norm_bound) {
    // The bound the tolerance gives was below what rounding into the output dtype leaves.
    char why[200];
    std::snprintf(why, sizeof why,
                  " (normwise bound %.3e: twice the %.3e the output dtype's rounding of the "
                  "reference leaves, its values being in the dtype's subnormals)",
                  norm_bound, rounding_floor);
    line += why;
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
