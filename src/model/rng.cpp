// Rng's bulk normals (src/model/rng.h). Out of line on purpose: the sanitized build compiles
// some callers of the header at -O0, and an inline copy from one of those could be the one the
// linker keeps; here the generator always has src/model's optimisation.
#include "src/model/rng.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numbers>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define ATTN_RNG_AVX2 1
#else
#define ATTN_RNG_AVX2 0
#endif

namespace attn {

namespace {

#if ATTN_RNG_AVX2
__attribute__((target("avx2"), always_inline)) inline __m256d kv(double v) {
  return _mm256_set1_pd(v);
}

// Rng::box_muller four pairs at a time: the same IEEE operations on the same operands in the same
// order, so the same bits (AVX2 without FMA, which would round a product and a sum once instead
// of twice; tests/model compares the two). out gets cos, sin of each pair in turn.
__attribute__((target("avx2"))) void box_muller4(const double* u1, const double* u2, double* out) {
  const __m256d u = _mm256_add_pd(_mm256_loadu_pd(u1), _mm256_set1_pd(0x1p-54));
  const __m256i bits = _mm256_castpd_si256(u);
  const __m256i mant = _mm256_and_si256(bits, _mm256_set1_epi64x(0x000fffffffffffffll));
  const __m256i above = _mm256_srli_epi64(
      _mm256_cmpgt_epi64(mant, _mm256_set1_epi64x(0x0006a09e667f3bcdll)), 63); // 0 or 1
  const __m256i mbits = _mm256_or_si256(
      mant, _mm256_slli_epi64(_mm256_sub_epi64(_mm256_set1_epi64x(0x3ff), above), 52));
  const __m256i ebits = _mm256_or_si256(_mm256_set1_epi64x(0x4330000000000000ll),
                                        _mm256_add_epi64(_mm256_srli_epi64(bits, 52), above));
  const __m256d m = _mm256_castsi256_pd(mbits);
  const __m256d e = _mm256_sub_pd(_mm256_castsi256_pd(ebits), _mm256_set1_pd(0x1p52 + 1023.0));
  const __m256d one = kv(1.0);
  const __m256d t = (m - one) / (m + one);
  const __m256d z = t * t;
  // (GCC's vector operators: one IEEE operation per lane each, and no lambdas, which would not
  // take this function's target.)
  const __m256d series0 = kv(1.0 / 11) + z * kv(1.0 / 13);
  const __m256d series1 = kv(1.0 / 9) + z * series0;
  const __m256d series2 = kv(1.0 / 7) + z * series1;
  const __m256d series3 = kv(1.0 / 5) + z * series2;
  const __m256d series4 = kv(1.0 / 3) + z * series3;
  const __m256d series = one + z * series4;
  const __m256d ln_u = e * kv(std::numbers::ln2) + (kv(2.0) * t) * series;
  const __m256d r = _mm256_sqrt_pd(_mm256_andnot_pd(kv(-0.0), kv(-2.0) * ln_u));

  const __m256d quarter = _mm256_loadu_pd(u2) * kv(4.0);
  const __m128i q32 = _mm256_cvttpd_epi32(quarter); // in 0..3: the truncation int64_t() makes
  const __m256d x = ((quarter - _mm256_cvtepi32_pd(q32)) - kv(0.5)) * kv(std::numbers::pi / 2);
  const __m256d x2 = x * x;
  // x2 * i6 * (...) is (x2 * i6) * (...), as in the scalar code.
  const __m256d s5 = one - (x2 * kv(1.0 / 110));
  const __m256d s4 = one - (x2 * kv(1.0 / 72)) * s5;
  const __m256d s3 = one - (x2 * kv(1.0 / 42)) * s4;
  const __m256d s2 = one - (x2 * kv(1.0 / 20)) * s3;
  const __m256d sx = x * (one - (x2 * kv(1.0 / 6)) * s2);
  const __m256d c6 = one - (x2 * kv(1.0 / 132));
  const __m256d c5 = one - (x2 * kv(1.0 / 90)) * c6;
  const __m256d c4 = one - (x2 * kv(1.0 / 56)) * c5;
  const __m256d c3 = one - (x2 * kv(1.0 / 30)) * c4;
  const __m256d c2 = one - (x2 * kv(1.0 / 12)) * c3;
  const __m256d cx = one - (x2 * kv(0.5)) * c2;
  const __m256d k = kv(std::numbers::sqrt2 / 2);
  const __m256i sb = _mm256_castpd_si256((sx + cx) * k);
  const __m256i cb = _mm256_castpd_si256((cx - sx) * k);
  const __m256i q = _mm256_cvtepi32_epi64(q32);
  const __m256i odd =
      _mm256_sub_epi64(_mm256_setzero_si256(), _mm256_and_si256(q, _mm256_set1_epi64x(1)));
  const __m256i flip = _mm256_slli_epi64(_mm256_and_si256(q, _mm256_set1_epi64x(2)), 62);
  const __m256i sin_bits = _mm256_xor_si256(
      _mm256_or_si256(_mm256_and_si256(cb, odd), _mm256_andnot_si256(odd, sb)), flip);
  const __m256i neg_sb = _mm256_xor_si256(sb, _mm256_set1_epi64x(int64_t(0x8000000000000000ull)));
  const __m256i cos_bits = _mm256_xor_si256(
      _mm256_or_si256(_mm256_and_si256(neg_sb, odd), _mm256_andnot_si256(odd, cb)), flip);
  const __m256d co = r * _mm256_castsi256_pd(cos_bits);
  const __m256d si = r * _mm256_castsi256_pd(sin_bits);
  const __m256d lo = _mm256_unpacklo_pd(co, si); // cos0 sin0 cos2 sin2
  const __m256d hi = _mm256_unpackhi_pd(co, si); // cos1 sin1 cos3 sin3
  _mm256_storeu_pd(out, _mm256_permute2f128_pd(lo, hi, 0x20));
  _mm256_storeu_pd(out + 4, _mm256_permute2f128_pd(lo, hi, 0x31));
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

} // namespace

void Rng::normals(double* out, std::size_t n) {
  std::size_t i = 0;
  if (n > 0 && has_spare_) {
    has_spare_ = false;
    out[i++] = spare_;
  }
  // In batches: the uniforms first (a serial chain), then the transforms, independent of one
  // another, so that the processor overlaps them.
  constexpr std::size_t kBatch = 64;
  double u1[kBatch], u2[kBatch];
  while (n - i >= 2) {
    const std::size_t pairs = std::min(kBatch, (n - i) / 2);
    for (std::size_t j = 0; j < pairs; ++j) {
      u1[j] = uniform();
      u2[j] = uniform();
    }
    std::size_t j = 0;
#if ATTN_RNG_AVX2
    if (has_avx2()) {
      for (; j + 4 <= pairs; j += 4) {
        box_muller4(u1 + j, u2 + j, &out[i + 2 * j]);
      }
    }
#endif
    for (; j < pairs; ++j) {
      box_muller(u1[j], u2[j], &out[i + 2 * j], &out[i + 2 * j + 1]);
    }
    i += 2 * pairs;
  }
  if (i < n) {
    out[i] = normal();
  }
}

// ln and sincos are short polynomials on reduced arguments, with relative errors near 1e-11 (the
// values become floats or narrower), and no branches (the quadrant is random, so a branch would
// miss half the time): libm's took two thirds of a verify run.
void Rng::box_muller(double u1, double u2, double* cos_out, double* sin_out) {
  // ln u1 = e ln 2 + ln m, m in [sqrt(1/2), sqrt(2)): ln m = 2 atanh(t), t = (m-1)/(m+1),
  // |t| <= 0.172, so seven odd terms of the atanh series leave ~1e-13.
  const double u = u1 + 0x1p-54; // never 0
  const auto bits = std::bit_cast<uint64_t>(u);
  const uint64_t mant = bits & 0x000fffffffffffffull;
  const uint64_t above = uint64_t(mant > 0x0006a09e667f3bcdull); // m > sqrt(2): halve it
  const uint64_t mbits = mant | ((0x3ffull - above) << 52);
  // The exponent (plus one when m was halved) as a double, exactly: 2^52 + k - 2^52.
  const uint64_t ebits = 0x4330000000000000ull | ((bits >> 52) + above);
  const auto m = std::bit_cast<double>(mbits);
  const auto ebiased = std::bit_cast<double>(ebits);
  const double e = ebiased - (0x1p52 + 1023.0);
  const double t = (m - 1.0) / (m + 1.0);
  const double z = t * t;
  constexpr double c3 = 1.0 / 3, c5 = 1.0 / 5, c7 = 1.0 / 7, c9 = 1.0 / 9, c11 = 1.0 / 11,
                   c13 = 1.0 / 13;
  const double series = 1.0 + z * (c3 + z * (c5 + z * (c7 + z * (c9 + z * (c11 + z * c13)))));
  const double ln_u = e * std::numbers::ln2 + 2.0 * t * series;
  const double r = std::sqrt(std::fabs(-2.0 * ln_u)); // fabs: sqrt needs no errno branch
  // a = 2 pi u2 = q pi/2 + pi/4 + x, quadrant q in 0..3, x in [-pi/4, pi/4): Taylor terms to
  // x^11 (sin) and x^12 (cos) leave < 1e-11; then rotate by pi/4 and by the quadrant.
  const double quarter = u2 * 4.0;
  const int64_t q = int64_t(quarter);
  const double x = (quarter - double(q) - 0.5) * (std::numbers::pi / 2);
  const double x2 = x * x;
  constexpr double i6 = 1.0 / 6, i20 = 1.0 / 20, i42 = 1.0 / 42, i72 = 1.0 / 72, i110 = 1.0 / 110;
  constexpr double i2 = 0.5, i12 = 1.0 / 12, i30 = 1.0 / 30, i56 = 1.0 / 56, i90 = 1.0 / 90,
                   i132 = 1.0 / 132;
  const double sx =
      x * (1.0 - x2 * i6 * (1.0 - x2 * i20 * (1.0 - x2 * i42 * (1.0 - x2 * i72 * (1.0 - x2 * i110)))));
  const double cx =
      1.0 - x2 * i2 *
                (1.0 - x2 * i12 *
                           (1.0 - x2 * i30 * (1.0 - x2 * i56 * (1.0 - x2 * i90 * (1.0 - x2 * i132)))));
  const double k = std::numbers::sqrt2 / 2;
  const double sq = (sx + cx) * k; // sin(pi/4 + x)
  const double cq = (cx - sx) * k; // cos(pi/4 + x)
  // The quadrant's rotation by masks: odd q swaps the two and negates the cosine, q >= 2
  // negates both.
  const auto sb = std::bit_cast<uint64_t>(sq);
  const auto cb = std::bit_cast<uint64_t>(cq);
  const uint64_t odd = uint64_t(0) - uint64_t(q & 1);
  const uint64_t flip = uint64_t(q & 2) << 62;
  const uint64_t sin_bits = ((cb & odd) | (sb & ~odd)) ^ flip;
  const uint64_t cos_bits = (((sb ^ 0x8000000000000000ull) & odd) | (cb & ~odd)) ^ flip;
  *cos_out = r * std::bit_cast<double>(cos_bits);
  *sin_out = r * std::bit_cast<double>(sin_bits);
}

} // namespace attn
