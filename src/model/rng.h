// A small seeded generator whose streams are identical on every platform and standard library,
// so that a seed printed on one machine reproduces the same test data on another.
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
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
  void normals(double* out, std::size_t n);

  // r cos(a) and r sin(a) for r = sqrt(-2 ln u1), a = 2 pi u2, u1 and u2 in [0, 1) (u1 is
  // taken half a step of uniform() up, never 0), in plain IEEE double arithmetic
  // (src/model/rng.cpp).
  static void box_muller(double u1, double u2, double* cos_out, double* sin_out);

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
