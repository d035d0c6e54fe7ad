// Rng's bulk normals (src/model/rng.h). Out of line on purpose: the sanitized build compiles
// some callers of the header at -O0, and an inline copy from one of those could be the one the
// linker keeps; here the generator always has src/model's optimisation.
#include "src/model/rng.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numbers>

namespace attn {

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
    for (std::size_t j = 0; j < pairs; ++j) {
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
