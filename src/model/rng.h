// A small seeded generator whose streams are identical on every platform and standard library,
// so that a seed printed on one machine reproduces the same test data on another.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numbers>

namespace attn {

class Rng {
public:
  explicit Rng(uint64_t seed) {
    uint64_t x = seed;
    for (auto& s : s_) {
      s = splitmix64(x);
    }
  }

  // xoshiro256** step.
  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }

  // Uniform integer in [lo, hi] (inclusive); hi >= lo.
  int64_t range(int64_t lo, int64_t hi) {
    const uint64_t span = uint64_t(hi - lo) + 1;
    return lo + int64_t(next_u64() % span);
  }

  // Standard normal (Box-Muller, one value per call; the second is kept for the next call).
  // Computed with box_muller() below, in plain IEEE double arithmetic: the same values on every
  // platform, whatever its libm.
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = uniform();
    const double u2 = uniform();
    double c;
    box_muller(u1, u2, &c, &spare_);
    has_spare_ = true;
    return c;
  }

  // The next n values of normal() (the stream is the same as n calls): test data is drawn this
  // way, millions of values per verify case.
  void normals(double* out, std::size_t n) {
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

  // r cos(a) and r sin(a) for r = sqrt(-2 ln u1), a = 2 pi u2, u1 and u2 in [0, 1) (u1 is
  // taken half a step of uniform() up, never 0). ln and sincos are short polynomials on reduced arguments, with
  // relative errors near 1e-11 (the values become floats or narrower), written without branches
  // so that the compiler vectorises a loop of them: libm's took two thirds of a verify run.
  static void box_muller(double u1, double u2, double* cos_out, double* sin_out) {
    // ln u1 = e ln 2 + ln m, m in [sqrt(1/2), sqrt(2)): ln m = 2 atanh(t), t = (m-1)/(m+1),
    // |t| <= 0.172, so seven odd terms of the atanh series leave ~1e-13.
    const double u = u1 + 0x1p-54; // never 0
    uint64_t bits;
    std::memcpy(&bits, &u, 8);
    const uint64_t mant = bits & 0x000fffffffffffffull;
    const uint64_t above = uint64_t(mant > 0x0006a09e667f3bcdull); // m > sqrt(2): halve it
    const uint64_t mbits = mant | ((0x3ffull - above) << 52);
    // The exponent (plus one when m was halved) as a double, exactly: 2^52 + k - 2^52.
    const uint64_t ebits = 0x4330000000000000ull | ((bits >> 52) + above);
    double m, ebiased;
    std::memcpy(&m, &mbits, 8);
    std::memcpy(&ebiased, &ebits, 8);
    const double e = ebiased - (0x1p52 + 1023.0);
    const double t = (m - 1.0) / (m + 1.0);
    const double z = t * t;
    constexpr double c3 = 1.0 / 3, c5 = 1.0 / 5, c7 = 1.0 / 7, c9 = 1.0 / 9, c11 = 1.0 / 11,
                     c13 = 1.0 / 13;
    const double series = 1.0 + z * (c3 + z * (c5 + z * (c7 + z * (c9 + z * (c11 + z * c13)))));
    const double ln_u = e * std::numbers::ln2 + 2.0 * t * series;
    const double r = std::sqrt(std::fabs(-2.0 * ln_u)); // fabs: no errno branch, so it vectorises
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
    // The quadrant's rotation by masks (it is random: a branch would miss half the time):
    // odd q swaps the two and negates the cosine, q >= 2 negates both.
    uint64_t sb, cb;
    std::memcpy(&sb, &sq, 8);
    std::memcpy(&cb, &cq, 8);
    const uint64_t odd = uint64_t(0) - uint64_t(q & 1);
    const uint64_t flip = uint64_t(q & 2) << 62;
    const uint64_t sin_bits = ((cb & odd) | (sb & ~odd)) ^ flip;
    const uint64_t cos_bits = (((sb ^ 0x8000000000000000ull) & odd) | (cb & ~odd)) ^ flip;
    double sin_a, cos_a;
    std::memcpy(&sin_a, &sin_bits, 8);
    std::memcpy(&cos_a, &cos_bits, 8);
    *cos_out = r * cos_a;
    *sin_out = r * sin_a;
  }

  // A new independent stream derived from this one (for per-tensor or per-case seeds).
  [[nodiscard]] uint64_t fork_seed() { return next_u64(); }

private:
  static uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t s_[4]{};
  double spare_ = 0.0;
  bool has_spare_ = false;
};

} // namespace attn
