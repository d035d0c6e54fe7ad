// Storage dtypes of attention tensors and the exact conversions between them and float.
// fp16 and bf16 are held as raw uint16 bits, fp8 as raw uint8 bits (src/model/fp8.h); rounding
// from float is round-to-nearest-even (fp8 also saturates to its largest finite value).
// The fp8 dtypes are for KV caches only (SPEC.md "fp8 KV caches"): queries and outputs are fp32,
// fp16 or bf16.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "src/model/fp8.h"

namespace attn {

enum class DType { f32, f16, bf16, fp8_e4m3, fp8_e5m2 };

// "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"
[[nodiscard]] std::string_view dtype_name(DType t);
// A query (and output) dtype: fp32/float32/f32/float, fp16/float16/f16/half, bf16/bfloat16;
// throws InputError otherwise (for an fp8 name, saying that fp8 is a KV-cache dtype).
[[nodiscard]] DType parse_dtype(std::string_view name);
// A KV-cache dtype as engines name it (vLLM's kv_cache_dtype): "auto" (the query's dtype
// `query`), "fp8" or "fp8_e4m3" (also "e4m3", "float8_e4m3fn"), "fp8_e5m2" (also "e5m2",
// "float8_e5m2"), or the query dtype's own name; throws InputError otherwise.
[[nodiscard]] DType parse_kv_dtype(std::string_view name, DType query);
// The fp8 format one of those names stands for ("fp8", "float8_e5m2", ...); nullopt for any other
// name, so that a caller can tell an fp8 name given where a query dtype belongs.
[[nodiscard]] std::optional<DType> fp8_named(std::string_view name);
[[nodiscard]] constexpr bool is_fp8(DType t) {
  return t == DType::fp8_e4m3 || t == DType::fp8_e5m2;
}
[[nodiscard]] constexpr Fp8Format fp8_format(DType t) {
  return t == DType::fp8_e5m2 ? Fp8Format::e5m2 : Fp8Format::e4m3;
}
[[nodiscard]] inline std::size_t dtype_size(DType t) {
  return t == DType::f32 ? 4 : is_fp8(t) ? 1 : 2;
}

[[nodiscard]] inline float bf16_to_float(uint16_t h) {
  return std::bit_cast<float>(uint32_t(h) << 16);
}

[[nodiscard]] inline uint16_t float_to_bf16(float f) {
  auto u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) {
    return uint16_t((u >> 16) | 0x0040u); // quiet NaN, keep the sign
  }
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return uint16_t(u >> 16);
}

[[nodiscard]] inline float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else { // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      u = sign | (uint32_t(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  return std::bit_cast<float>(u);
}

[[nodiscard]] inline uint16_t float_to_half(float f) {
  const auto u = std::bit_cast<uint32_t>(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t absu = u & 0x7fffffffu;
  if (absu >= 0x7f800000u) { // inf or nan
    return uint16_t(sign | 0x7c00u | (absu > 0x7f800000u ? 0x200u : 0u));
  }
  if (absu >= 0x477ff000u) { // rounds to >= 65520: overflow to inf
    return uint16_t(sign | 0x7c00u);
  }
  if (absu < 0x38800000u) {   // below the smallest normal half (2^-14): subnormal or zero
    if (absu < 0x33000000u) { // below half of the smallest subnormal (2^-25): zero
      return sign;
    }
    uint32_t e = absu >> 23;
    uint32_t man = (absu & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; // 14 + (127 - 1 - e) ... position of the result's lsb
    uint32_t res = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (res & 1u))) {
      ++res;
    }
    return uint16_t(sign | res);
  }
  uint32_t res = ((absu >> 13) - (112u << 10)); // rebias exponent 127 -> 15
  uint32_t rem = absu & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (res & 1u))) {
    ++res;
  }
  return uint16_t(sign | res);
}

// dst[i] = float_to_half(float(src[i])) for i < n: the same bits, eight at a time through F16C's
// conversion where the processor has it (round to nearest even, subnormals and overflow to
// infinity as float_to_half; a group holding a NaN, whose payload F16C keeps differently, goes
// element by element). Test data is stored this way, hundreds of millions of values a sweep.
void doubles_to_halves(const double* src, uint16_t* dst, std::size_t n);
// dst[i] = half_to_float(src[i]) for i < n: the same bits, eight at a time through F16C where the
// processor has it (a group holding a NaN, whose payload F16C makes quiet, goes element by
// element).
void halves_to_floats(const uint16_t* src, float* dst, std::size_t n);

// Round a float to the precision of `t` (identity for fp32).
[[nodiscard]] inline float round_to(DType t, float f) {
  switch (t) {
  case DType::fp8_e4m3:
  case DType::fp8_e5m2:
    return fp8_to_float(fp8_format(t), float_to_fp8(fp8_format(t), f));
  case DType::f16:
    return half_to_float(float_to_half(f));
  case DType::bf16:
    return bf16_to_float(float_to_bf16(f));
  default:
    return f;
  }
}

// Element `i` of a buffer of dtype `t`, as float.
[[nodiscard]] inline float load_as_float(DType t, const void* data, std::size_t i) {
  switch (t) {
  case DType::fp8_e4m3:
  case DType::fp8_e5m2:
    return fp8_to_float(fp8_format(t), static_cast<const uint8_t*>(data)[i]);
  case DType::f16:
    return half_to_float(static_cast<const uint16_t*>(data)[i]);
  case DType::bf16:
    return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
  default:
    return static_cast<const float*>(data)[i];
  }
}

inline void store_from_float(DType t, void* data, std::size_t i, float v) {
  switch (t) {
  case DType::fp8_e4m3:
  case DType::fp8_e5m2:
    static_cast<uint8_t*>(data)[i] = float_to_fp8(fp8_format(t), v);
    break;
  case DType::f16:
    static_cast<uint16_t*>(data)[i] = float_to_half(v);
    break;
  case DType::bf16:
    static_cast<uint16_t*>(data)[i] = float_to_bf16(v);
    break;
  default:
    static_cast<float*>(data)[i] = v;
  }
}

} // namespace attn
