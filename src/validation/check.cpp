#include "src/validation/check.h"

#include <cmath>
#include <cstdio>
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

CheckReport check_output(const HostTensor& out, const std::vector<float>* lse,
                         const ReferenceResult& ref, const Tolerance& tol) {
  CheckReport rep;
  const int H = ref.heads;
  const int D = ref.head_dim;
  // The loops below index by the reference's shape; a smaller output would be read past its end.
  const int64_t want_out = int64_t(ref.rows) * H * D;
  if (int64_t(out.data.size()) != want_out * int64_t(dtype_size(out.dtype))) {
    throw InputError("out holds " + std::to_string(out.data.size() / dtype_size(out.dtype)) +
                     " elements, expected rows x heads x head_dim = " + std::to_string(want_out));
  }
  if (lse && int64_t(lse->size()) != int64_t(ref.rows) * H) {
    throw InputError("lse holds " + std::to_string(lse->size()) +
                     " elements, expected rows x heads = " + std::to_string(int64_t(ref.rows) * H));
  }
  double err2 = 0.0;
  double ref2 = 0.0;
  auto note = [&](int row, int head, int dim, double got, double want, const char* what) {
    if (rep.first.size() < std::size_t(kMaxListedMismatches)) {
      rep.first.push_back({row, head, dim, got, want, what});
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
        if (is_poison(out, i)) {
          ++rep.unwritten;
          note(r, h, d, std::nan(""), want, "unwritten");
          continue;
        }
        const double got = out.get(i);
        if (!std::isfinite(got)) {
          ++rep.nonfinite;
          note(r, h, d, got, want, std::isnan(got) ? "nan" : "inf");
          continue;
        }
        const double e = std::abs(got - want);
        err2 += e * e;
        ref2 += want * want;
        rep.max_abs_err = std::max(rep.max_abs_err, e);
        if (e > tol.atol + tol.rtol * std::abs(want)) {
          ++rep.bad;
          note(r, h, d, got, want, "mismatch");
        }
      }
      if (lse) {
        const std::size_t i = std::size_t(r) * H + h;
        const float g = (*lse)[i];
        const double want = ref.lse[i];
        if (is_poison(g)) {
          ++rep.lse_bad;
          ++rep.unwritten;
          note(r, h, -1, std::nan(""), want, "unwritten");
        } else if (std::isnan(g)) {
          ++rep.lse_bad;
          note(r, h, -1, g, want, "nan");
        } else if (std::isinf(want) || std::isinf(g)) {
          if (!(std::isinf(want) && std::isinf(g) && (want < 0) == (g < 0))) {
            ++rep.lse_bad;
            note(r, h, -1, g, want, "mismatch");
          }
        } else if (std::abs(g - want) > tol.lse_atol) {
          ++rep.lse_bad;
          rep.max_lse_err = std::max(rep.max_lse_err, std::abs(g - want));
          note(r, h, -1, g, want, "mismatch");
        } else {
          rep.max_lse_err = std::max(rep.max_lse_err, std::abs(g - want));
        }
      }
    }
  }
  rep.norm_rel_err = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  rep.pass = rep.bad == 0 && rep.unwritten == 0 && rep.nonfinite == 0 && rep.lse_bad == 0 &&
             rep.norm_rel_err <= tol.norm_rel;
  return rep;
}

std::string CheckReport::summary() const {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "norm_rel_err=%.3e max_abs_err=%.3e max_lse_err=%.3e checked=%lld bad=%lld "
                "unwritten=%lld nonfinite=%lld lse_bad=%lld",
                norm_rel_err, max_abs_err, max_lse_err, (long long)checked, (long long)bad,
                (long long)unwritten, (long long)nonfinite, (long long)lse_bad);
  return buf;
}

std::string CheckReport::details() const {
  std::ostringstream s;
  for (const auto& m : first) {
    char buf[200];
    if (m.dim >= 0) {
      std::snprintf(buf, sizeof buf, "  out[row=%d, head=%d, dim=%d] got %.6g want %.6g (%s)\n",
                    m.row, m.head, m.dim, m.got, m.want, m.what.c_str());
    } else {
      std::snprintf(buf, sizeof buf, "  lse[row=%d, head=%d] got %.6g want %.6g (%s)\n", m.row,
                    m.head, m.got, m.want, m.what.c_str());
    }
    s << buf;
  }
  return s.str();
}

} // namespace attn
