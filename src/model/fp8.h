// The two 8-bit float formats of fp8 KV caches (SPEC.md "fp8 KV caches") and exact conversions:
//   E4M3FN (OCP): sign, 4 exponent bits (bias 7), 3 mantissa bits; max 448, no infinity, NaN is
//                 S.1111.111;
//   E5M2:         sign, 5 exponent bits (bias 15), 2 mantissa bits; max 57344, IEEE infinities
//                 and NaNs.
// Decoding is a table lookup (every value is exact in float). Encoding rounds to nearest even
// and saturates to the largest finite value, infinities included, as CUDA's __NV_SATFINITE
// conversions do; NaN stays NaN.
#pragma once
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

namespace attn {

enum class Fp8Format { e4m3, e5m2 };

struct Fp8Spec {
  int exp_bits;
  int man_bits;
  int bias;
  uint8_t max_bits;  // the largest finite magnitude's bit pattern
  uint8_t nan_bits;  // the positive NaN this code writes
};

[[nodiscard]] constexpr Fp8Spec fp8_spec(Fp8Format f) {
  return f == Fp8Format::e4m3 ? Fp8Spec{4, 3, 7, 0x7e, 0x7f} : Fp8Spec{5, 2, 15, 0x7b, 0x7e};
}

namespace detail {
// The value of an fp8 bit pattern, from its fields.
[[nodiscard]] inline float fp8_decode_slow(Fp8Format f, uint8_t bits) {
  const Fp8Spec s = fp8_spec(f);
  const bool neg = (bits & 0x80u) != 0;
  const int e = (bits >> s.man_bits) & ((1 << s.exp_bits) - 1);
  const int m = bits & ((1 << s.man_bits) - 1);
  const int e_all = (1 << s.exp_bits) - 1;
  double v;
  if (f == Fp8Format::e4m3 && e == e_all && m == (1 << s.man_bits) - 1) {
    v = std::nan("");
  } else if (f == Fp8Format::e5m2 && e == e_all) {
    v = m == 0 ? HUGE_VAL : std::nan("");
  } else if (e == 0) {
    v = std::ldexp(double(m), 1 - s.bias - s.man_bits);
  } else {
    v = std::ldexp(double((1 << s.man_bits) + m), e - s.bias - s.man_bits);
  }
  return float(neg ? -v : v);
}

struct Fp8Table {
  std::array<float, 256> v{};
  explicit Fp8Table(Fp8Format f) {
    for (int b = 0; b < 256; ++b) {
      v[std::size_t(b)] = fp8_decode_slow(f, uint8_t(b));
    }
  }
};
} // namespace detail

// The value of an fp8 element, as float (exact).
[[nodiscard]] inline float fp8_to_float(Fp8Format f, uint8_t bits) {
  static const detail::Fp8Table e4m3(Fp8Format::e4m3);
  static const detail::Fp8Table e5m2(Fp8Format::e5m2);
  return (f == Fp8Format::e4m3 ? e4m3 : e5m2).v[bits];
}

namespace detail {
// float_to_fp8 by the values' arithmetic (in double, with libm): the definition the bit-level
// encoder below is tested against, every float included (tests/model/test_fp8.cpp).
[[nodiscard]] inline uint8_t fp8_encode_slow(Fp8Format f, float x) {
  const Fp8Spec s = fp8_spec(f);
  const uint8_t sign = std::signbit(x) ? 0x80u : 0x00u;
  if (std::isnan(x)) {
    return uint8_t(sign | s.nan_bits);
  }
  const double a = std::fabs(double(x));
  const double max = double(fp8_decode_slow(f, s.max_bits));
  if (a >= max) {
    return uint8_t(sign | s.max_bits);
  }
  if (a == 0.0) {
    return sign;
  }
  // The spacing of representable values around a: 2^(e - man_bits) for a normal a with
  // 2^e <= a < 2^(e+1), the subnormal spacing below the smallest normal.
  const int min_exp = 1 - s.bias;
  int e = std::ilogb(a);
  if (e < min_exp) {
    e = min_exp;
  }
  const double quantum = std::ldexp(1.0, e - s.man_bits);
  const double q = a / quantum; // exact: a float scaled by a power of two
  double r = std::floor(q);
  const double frac = q - r;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0.0)) {
    r += 1.0;
  }
  const double v = r * quantum; // may reach 2^(e+1), the next binade, or max's neighbour
  if (v > max) {
    return uint8_t(sign | s.max_bits);
  }
  if (v == 0.0) {
    return sign;
  }
  int ve = std::ilogb(v);
  if (ve < min_exp) { // subnormal: exponent field 0, mantissa counts quanta of the smallest
    return uint8_t(sign | uint8_t(std::lround(v / std::ldexp(1.0, min_exp - s.man_bits))));
  }
  const int man = int(std::lround(v / std::ldexp(1.0, ve - s.man_bits))) - (1 << s.man_bits);
  return uint8_t(sign | uint8_t((ve + s.bias) << s.man_bits) | uint8_t(man));
}

} // namespace detail

// The fp8 element nearest to `x` (ties to even mantissa), saturated to +-max (infinities too);
// NaN gives the format's NaN with x's sign. On the float's bits: test data fills caches with
// millions of these per verify case.
[[nodiscard]] inline uint8_t float_to_fp8(Fp8Format f, float x) {
  const Fp8Spec s = fp8_spec(f);
  const auto u = std::bit_cast<uint32_t>(x);
  const auto sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) {
    return uint8_t(sign | s.nan_bits);
  }
  // The largest finite magnitude as float bits: exponent field E - 1 (e4m3: E, its top mantissa
  // pattern being NaN), all mantissa bits but e4m3's last.
  const uint32_t max_float_bits = f == Fp8Format::e4m3 ? 0x43e00000u   // 448
                                                       : 0x47600000u;  // 57344
  if (absu >= max_float_bits) {
    return uint8_t(sign | s.max_bits);
  }
  const int e = int(absu >> 23) - 127; // unbiased; float subnormals are far below fp8's
  const int min_exp = 1 - s.bias;
  const uint32_t man = (absu & 0x7fffffu) | 0x800000u; // 24 bits with the implicit one
  // Quanta of the result: the mantissa shifted so that its last kept bit is the fp8 spacing,
  // 2^(e - man_bits) for a normal result, 2^(min_exp - man_bits) for a subnormal one.
  const int shift = 23 - s.man_bits + (e < min_exp ? min_exp - e : 0);
  if (shift >= 25 || absu < 0x00800000u) { // below half the smallest subnormal: zero
    return sign;
  }
  uint32_t res = man >> shift;
  const uint32_t rem = man & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (res & 1u))) {
    ++res; // may carry into the exponent: still the right pattern
  }
  if (e >= min_exp) {
    res += uint32_t(e - min_exp) << s.man_bits; // the implicit one is exponent field 1
  }
  return uint8_t(sign | uint8_t(res));
}

} // namespace attn
