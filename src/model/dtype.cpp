#include "src/model/dtype.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define ATTN_DTYPE_F16C 1
#else
#define ATTN_DTYPE_F16C 0
#endif

#include "src/model/errors.h"

namespace attn {

std::string_view dtype_name(DType t) {
  switch (t) {
  case DType::f16:
    return "fp16";
  case DType::bf16:
    return "bf16";
  case DType::fp8_e4m3:
    return "fp8_e4m3";
  case DType::fp8_e5m2:
    return "fp8_e5m2";
  default:
    return "fp32";
  }
}

DType parse_dtype(std::string_view name) {
  if (name == "fp32" || name == "float32" || name == "f32" || name == "float") {
    return DType::f32;
  }
  if (name == "fp16" || name == "float16" || name == "f16" || name == "half") {
    return DType::f16;
  }
  if (name == "bf16" || name == "bfloat16") {
    return DType::bf16;
  }
  if (name.substr(0, 3) == "fp8" || name.substr(0, 6) == "float8" || name == "e4m3" ||
      name == "e5m2") {
    throw InputError("dtype '" + std::string(name) +
                     "' is a KV-cache dtype: queries and outputs are fp32, fp16 or bf16, and the "
                     "cache's dtype is given apart (kv_dtype)");
  }
  throw InputError("unknown dtype '" + std::string(name) + "' (expected fp32, fp16 or bf16)");
}

std::optional<DType> fp8_named(std::string_view name) {
  if (name == "fp8" || name == "fp8_e4m3" || name == "e4m3" || name == "float8_e4m3fn" ||
      name == "fp8_e4m3fn") {
    return DType::fp8_e4m3;
  }
  if (name == "fp8_e5m2" || name == "e5m2" || name == "float8_e5m2") {
    return DType::fp8_e5m2;
  }
  return std::nullopt;
}

DType parse_kv_dtype(std::string_view name, DType query) {
  if (name == "auto" || name == dtype_name(query)) {
    return query;
  }
  if (const std::optional<DType> fp8 = fp8_named(name)) {
    return *fp8;
  }
  throw InputError("unknown KV-cache dtype '" + std::string(name) + "' (expected auto, fp8, " +
                   "fp8_e4m3 or fp8_e5m2, or the query dtype " + std::string(dtype_name(query)) +
                   ")");
}

namespace {

#if ATTN_DTYPE_F16C
// Eight at a time; returns how many it stored (the rest, from a group holding a NaN on, is left
// to the scalar loop).
__attribute__((target("avx,f16c"))) std::size_t
doubles_to_halves_f16c(const double* src, uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128 lo = _mm256_cvtpd_ps(_mm256_loadu_pd(src + i));
    const __m128 hi = _mm256_cvtpd_ps(_mm256_loadu_pd(src + i + 4));
    const __m256 f = _mm256_set_m128(hi, lo);
    if (_mm256_movemask_ps(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)) != 0) {
      break;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  return i;
}

// The same for the widening: a group holding a NaN, whose payload F16C would make quiet, and the
// rest go to the scalar loop.
__attribute__((target("avx,f16c"))) std::size_t halves_to_floats_f16c(const uint16_t* src,
                                                                      float* dst, std::size_t n) {
  const __m128i magnitude = _mm_set1_epi16(0x7fff);
  const __m128i infinity = _mm_set1_epi16(0x7c00);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    // |h| above infinity's bits, compared as signed 16-bit numbers (both are non-negative): NaN.
    const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, magnitude), infinity);
    if (_mm_movemask_epi8(nan) != 0) {
      break;
    }
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  return i;
}

bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return yes;
}
#else
// No F16C loop in this build: every element goes through the scalar conversion.
bool has_f16c() { return false; }
std::size_t doubles_to_halves_f16c(const double*, uint16_t*, std::size_t) { return 0; }
std::size_t halves_to_floats_f16c(const uint16_t*, float*, std::size_t) { return 0; }
#endif

} // namespace

void doubles_to_halves(const double* src, uint16_t* dst, std::size_t n) {
  for (std::size_t i = has_f16c() ? doubles_to_halves_f16c(src, dst, n) : 0; i < n; ++i) {
    dst[i] = float_to_half(float(src[i]));
  }
}

void halves_to_floats(const uint16_t* src, float* dst, std::size_t n) {
  for (std::size_t i = has_f16c() ? halves_to_floats_f16c(src, dst, n) : 0; i < n; ++i) {
    dst[i] = half_to_float(src[i]);
  }
}

} // namespace attn
