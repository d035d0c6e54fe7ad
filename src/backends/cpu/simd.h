// SIMD plumbing of the CPU kernels: the target attributes of the instruction-set builds, float
// vectors with unaligned loads, and fp16/bf16 -> fp32 conversion. Included by cpu_kernels.cpp
// alone (the run-time choice of a build is src/backends/cpu/isa.h).
//
// The helpers are file-local (anonymous namespace), as they were inside cpu_kernels.cpp: with
// external linkage GCC allocated registers differently in the kernel loops, and the F16C loops
// must stay in the kernels' unit for the calls to them to compile the same.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "src/backends/cpu/isa.h"
#include "src/model/dtype.h"

// The vector helpers below are always inlined, so the ABI notes GCC prints for passing wide
// vectors by value do not apply. Silenced for the rest of the translation unit, as GCC reports
// them at the kernels' call sites.
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

// Each kernel loop is compiled once per ISA level by giving its entry point one of these target
// attributes; everything the entry point inlines is compiled for that level.
#if defined(__x86_64__) && defined(__GNUC__)
#define ATTN_CPU_MULTI_ISA 1
#define ATTN_TARGET_AVX2 __attribute__((target("arch=x86-64-v3")))
#define ATTN_TARGET_AVX512 __attribute__((target("arch=x86-64-v4")))
#else
#define ATTN_CPU_MULTI_ISA 0
#endif
#define ATTN_ALWAYS_INLINE [[gnu::always_inline]] inline

namespace attn::cpu {

namespace {

// fp16 bits -> fp32 without branches, exact for every input (normals, subnormals, inf, NaN),
// written with masks so the baseline build vectorises it.
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

#if ATTN_CPU_MULTI_ISA
// The v3/v4 builds convert with F16C. GCC 12 does not vectorise _Float16 conversions under a
// target attribute, so these use the intrinsics, as out-of-line calls (one per cache-block run).
[[maybe_unused]] ATTN_TARGET_AVX2 void half_to_float_f16c(const uint16_t* __restrict src,
                                                          float* __restrict dst, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) {
    dst[i] = half_bits_to_float(src[i]);
  }
}
// GCC 12's _mm512_cvtph_ps passes an undefined source for its unused mask operand, which
// -Wmaybe-uninitialized reports; the full mask never reads it.
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
[[maybe_unused]] ATTN_TARGET_AVX512 void half_to_float_avx512(const uint16_t* __restrict src,
                                                              float* __restrict dst, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
  for (; i < n; ++i) {
    dst[i] = half_bits_to_float(src[i]);
  }
}
#pragma GCC diagnostic pop
#endif

// n stored values of type DT at base + offset (elements) to fp32, with the ISA's conversion.
template <DType DT, Isa I>
ATTN_ALWAYS_INLINE void convert_run(const void* base, int64_t offset, int n,
                                    float* __restrict dst) {
  if constexpr (DT == DType::f32) {
    std::memcpy(dst, static_cast<const float*>(base) + offset, std::size_t(n) * 4);
  } else if constexpr (DT == DType::bf16) {
    const uint16_t* __restrict src = static_cast<const uint16_t*>(base) + offset;
    for (int i = 0; i < n; ++i) {
      const uint32_t u = uint32_t(src[i]) << 16;
      std::memcpy(&dst[i], &u, 4);
    }
  } else {
    const uint16_t* __restrict src = static_cast<const uint16_t*>(base) + offset;
#if ATTN_CPU_MULTI_ISA
    if constexpr (I == Isa::avx512) {
      half_to_float_avx512(src, dst, n);
      return;
    } else if constexpr (I == Isa::avx2) {
      half_to_float_f16c(src, dst, n);
      return;
    }
#endif
    for (int i = 0; i < n; ++i) {
      dst[i] = half_bits_to_float(src[i]);
    }
  }
}

// GCC/Clang vector extensions: 16 floats, split by the compiler into the widest registers the
// build's ISA has (one zmm, two ymm or four xmm). Loads and stores go through memcpy (unaligned).
typedef float f32x16 __attribute__((vector_size(64)));
typedef float f32x8 __attribute__((vector_size(32)));

template <class V> ATTN_ALWAYS_INLINE V vload(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}
template <class V> ATTN_ALWAYS_INLINE void vstore(float* p, V v) { std::memcpy(p, &v, sizeof(V)); }
template <class V> ATTN_ALWAYS_INLINE float hsum(V v) {
  float s = 0.0f;
  for (std::size_t l = 0; l < sizeof(V) / sizeof(float); ++l) {
    s += v[l];
  }
  return s;
}

} // namespace

} // namespace attn::cpu

// Calls NAME_avx512<T>, NAME_avx2<T> or NAME_base<T>(...) for (isa, dtype): the entry points a
// kernel file compiles once per ISA level with the attributes above.
#if ATTN_CPU_MULTI_ISA
#define ATTN_DISPATCH(NAME, ISA, DT, ...)                                                          \
  do {                                                                                             \
    auto pick = [&]<DType T>() {                                                                   \
      if ((ISA) == Isa::avx512) {                                                                  \
        NAME##_avx512<T>(__VA_ARGS__);                                                             \
      } else if ((ISA) == Isa::avx2) {                                                             \
        NAME##_avx2<T>(__VA_ARGS__);                                                               \
      } else {                                                                                     \
        NAME##_base<T>(__VA_ARGS__);                                                               \
      }                                                                                            \
    };                                                                                             \
    if ((DT) == DType::f16) {                                                                      \
      pick.template operator()<DType::f16>();                                                      \
    } else if ((DT) == DType::bf16) {                                                              \
      pick.template operator()<DType::bf16>();                                                     \
    } else {                                                                                       \
      pick.template operator()<DType::f32>();                                                      \
    }                                                                                              \
  } while (0)
#else
#define ATTN_DISPATCH(NAME, ISA, DT, ...)                                                          \
  do {                                                                                             \
    if ((DT) == DType::f16) {                                                                      \
      NAME##_base<DType::f16>(__VA_ARGS__);                                                        \
    } else if ((DT) == DType::bf16) {                                                              \
      NAME##_base<DType::bf16>(__VA_ARGS__);                                                       \
    } else {                                                                                       \
      NAME##_base<DType::f32>(__VA_ARGS__);                                                        \
    }                                                                                              \
  } while (0)
#endif
