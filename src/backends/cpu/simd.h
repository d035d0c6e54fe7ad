// What the CPU kernels' instruction-set builds share: exact fp16 -> fp32 conversion without
// branches, and the horizontal sums and maxima of the vector widths they use. Included by
// cpu_kernels.cpp alone, before its per-level bodies (cpu_kernels_body.inc).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

// The kernels pass vectors to inlined helpers by value; GCC's notes about the ABI of doing so
// across builds do not apply. Silenced for the rest of the translation unit, as GCC reports them
// at the call sites.
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#define ATTN_ALWAYS_INLINE [[gnu::always_inline]] inline

namespace attn::cpu::simd {

// GCC/Clang vector extensions of 4, 8 and 16 floats (xmm, ymm, zmm), matching int32 lanes (what
// comparisons return) and 16-bit lanes (stored fp16/bf16). Each level uses the width it holds.
typedef float f32x4 __attribute__((vector_size(16)));
typedef float f32x8 __attribute__((vector_size(32)));
typedef float f32x16 __attribute__((vector_size(64)));
typedef int32_t i32x4 __attribute__((vector_size(16)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
typedef uint16_t u16x4 __attribute__((vector_size(8)));
typedef uint16_t u16x8 __attribute__((vector_size(16)));
typedef uint16_t u16x16 __attribute__((vector_size(32)));
typedef uint32_t u32x4 __attribute__((vector_size(16)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef int8_t i8x4 __attribute__((vector_size(4)));
typedef int8_t i8x8 __attribute__((vector_size(8)));
typedef int8_t i8x16 __attribute__((vector_size(16)));
typedef uint8_t u8x4 __attribute__((vector_size(4)));
typedef uint8_t u8x8 __attribute__((vector_size(8)));
typedef uint8_t u8x16 __attribute__((vector_size(16)));
// The 8-bit, 16-bit and 32-bit integer vectors of as many lanes as V (4, 8 or 16 floats).
template <class V>
using u8_lanes =
    std::conditional_t<sizeof(V) == 64, u8x16, std::conditional_t<sizeof(V) == 32, u8x8, u8x4>>;
template <class V>
using u16_lanes =
    std::conditional_t<sizeof(V) == 64, u16x16, std::conditional_t<sizeof(V) == 32, u16x8, u16x4>>;
template <class V>
using i8_lanes =
    std::conditional_t<sizeof(V) == 64, i8x16, std::conditional_t<sizeof(V) == 32, i8x8, i8x4>>;
template <class V>
using u32_lanes =
    std::conditional_t<sizeof(V) == 64, u32x16, std::conditional_t<sizeof(V) == 32, u32x8, u32x4>>;
template <class V>
using i32_lanes =
    std::conditional_t<sizeof(V) == 64, i32x16, std::conditional_t<sizeof(V) == 32, i32x8, i32x4>>;

// fp16 bits -> fp32 without branches, exact for every input (normals, subnormals, inf, NaN),
// written with masks so the portable build vectorises it.
ATTN_ALWAYS_INLINE float half_bits_to_float(uint16_t h) {
  const int32_t em = int32_t(h & 0x7fffu);
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t normal = (uint32_t(em) << 13) + 0x38000000u; // rebias 15 -> 127
  const uint32_t infnan = (uint32_t(em) << 13) | 0x7f800000u; // keep the NaN payload
  const float sub_f = float(em) * 0x1p-24f;                   // subnormal: man * 2^-24
  uint32_t sub;
  std::memcpy(&sub, &sub_f, 4);
  const uint32_t sub_mask = 0u - uint32_t(em < 0x400);
  const uint32_t inf_mask = 0u - uint32_t(em >= 0x7c00);
  const uint32_t u =
      ((sub & sub_mask) | (infnan & inf_mask) | (normal & ~(sub_mask | inf_mask))) | sign;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Horizontal sum and max by halving (log2(lanes) shuffles), not lane by lane.
ATTN_ALWAYS_INLINE float hsum(f32x4 v) {
  const f32x4 s = v + __builtin_shufflevector(v, v, 2, 3, 0, 1);
  return s[0] + s[1];
}
ATTN_ALWAYS_INLINE float hsum(f32x8 v) {
  return hsum(__builtin_shufflevector(v, v, 0, 1, 2, 3) +
              __builtin_shufflevector(v, v, 4, 5, 6, 7));
}
ATTN_ALWAYS_INLINE float hsum(f32x16 v) {
  return hsum(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
              __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15));
}
ATTN_ALWAYS_INLINE f32x4 vmax(f32x4 a, f32x4 b) { return a > b ? a : b; }
ATTN_ALWAYS_INLINE f32x8 vmax(f32x8 a, f32x8 b) { return a > b ? a : b; }
ATTN_ALWAYS_INLINE f32x16 vmax(f32x16 a, f32x16 b) { return a > b ? a : b; }
ATTN_ALWAYS_INLINE float hmax(f32x4 v) {
  const f32x4 s = vmax(v, __builtin_shufflevector(v, v, 2, 3, 0, 1));
  return s[0] > s[1] ? s[0] : s[1];
}
ATTN_ALWAYS_INLINE float hmax(f32x8 v) {
  return hmax(
      vmax(__builtin_shufflevector(v, v, 0, 1, 2, 3), __builtin_shufflevector(v, v, 4, 5, 6, 7)));
}
ATTN_ALWAYS_INLINE float hmax(f32x16 v) {
  return hmax(vmax(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7),
                   __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15)));
}

template <class V> ATTN_ALWAYS_INLINE V vload(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}
template <class V> ATTN_ALWAYS_INLINE void vstore(float* p, V v) { std::memcpy(p, &v, sizeof(V)); }

} // namespace attn::cpu::simd
