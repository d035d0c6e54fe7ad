// The CPU kernel loops. Every inner loop is written for the compiler's auto-vectoriser: a key
// tile's rows are converted to fp32 once into a small scratch buffer (fp32 caches are read in
// place), dot products keep 16 independent lane sums, and P*V is a plain axpy over head_dim.
// Each loop body is compiled three times (baseline x86-64, x86-64-v3, x86-64-v4) and chosen at
// run time; all softmax and mask math comes from kernels/attn_math.h.
#include "src/cpu_kernels.h"

#include <algorithm>
#include <climits>
#include <cstring>

namespace attn::cpu {

namespace am = attn_math;

#if defined(__x86_64__) && defined(__GNUC__)
#define ATTN_CPU_MULTI_ISA 1
#define ATTN_TARGET_AVX2 __attribute__((target("arch=x86-64-v3")))
#define ATTN_TARGET_AVX512 __attribute__((target("arch=x86-64-v4")))
#else
#define ATTN_CPU_MULTI_ISA 0
#endif
#define ATTN_ALWAYS_INLINE [[gnu::always_inline]] inline

const char* isa_name(Isa isa) {
  switch (isa) {
  case Isa::avx2:
    return "x86-64-v3";
  case Isa::avx512:
    return "x86-64-v4";
  default:
    return "baseline";
  }
}

bool isa_supported(Isa isa) {
  if (isa == Isa::base) {
    return true;
  }
#if ATTN_CPU_MULTI_ISA
  __builtin_cpu_init();
#if defined(__clang__)
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi") &&
                  __builtin_cpu_supports("bmi2");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                  __builtin_cpu_supports("avx512cd");
#else
  const bool v3 = __builtin_cpu_supports("x86-64-v3");
  const bool v4 = __builtin_cpu_supports("x86-64-v4");
#endif
  return isa == Isa::avx2 ? v3 : v4;
#else
  return false;
#endif
}

Isa best_isa() {
  if (isa_supported(Isa::avx512)) {
    return Isa::avx512;
  }
  return isa_supported(Isa::avx2) ? Isa::avx2 : Isa::base;
}

void size_scratch(Scratch& s, int max_rows, int max_heads, int head_dim, int k_tile) {
  const std::size_t vectors = std::size_t(max_rows) * std::size_t(max_heads);
  s.q.resize(vectors * std::size_t(head_dim));
  s.acc.resize(vectors * std::size_t(head_dim));
  s.scores.resize(vectors * std::size_t(k_tile));
  s.kv.resize(std::size_t(k_tile) * std::size_t(head_dim));
  s.rows.resize(std::size_t(k_tile));
  s.sm.resize(vectors);
  s.lo.resize(std::size_t(max_rows));
  s.hi.resize(std::size_t(max_rows));
}

namespace {

// fp16 bits -> fp32 without branches, exact for every input (normals, subnormals, inf, NaN),
// so the baseline build vectorises it; the v3/v4 builds use the F16C conversion instead.
ATTN_ALWAYS_INLINE float half_bits_to_float(uint16_t h) {
  const int32_t em = int32_t(h & 0x7fffu);
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t normal = (uint32_t(em) << 13) + 0x38000000u;   // rebias 15 -> 127
  const uint32_t infnan = (uint32_t(em) << 13) | 0x7f800000u;   // keep the NaN payload
  const float sub_f = float(em) * 0x1p-24f;                      // subnormal: man * 2^-24
  uint32_t sub;
  std::memcpy(&sub, &sub_f, 4);
  const uint32_t bits = em < 0x400 ? sub : (em >= 0x7c00 ? infnan : normal);
  const uint32_t u = bits | sign;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <DType DT, Isa I>
ATTN_ALWAYS_INLINE void convert_run(const void* base, int64_t offset, int n, float* __restrict dst) {
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
    if constexpr (I == Isa::base) {
      for (int i = 0; i < n; ++i) {
        dst[i] = half_bits_to_float(src[i]);
      }
    } else {
      for (int i = 0; i < n; ++i) {
        _Float16 h;
        std::memcpy(&h, &src[i], 2);
        dst[i] = float(h);
      }
    }
  }
}

// dot(a, b) over n floats, n a multiple of 8 (SPEC head_dim). Sixteen lane sums keep the loop
// free of a serial dependency, so it vectorises without reassociation flags.
ATTN_ALWAYS_INLINE float dot(const float* __restrict a, const float* __restrict b, int n) {
  float acc[16] = {};
  int d = 0;
  for (; d + 16 <= n; d += 16) {
    for (int l = 0; l < 16; ++l) {
      acc[l] += a[d + l] * b[d + l];
    }
  }
  for (; d + 8 <= n; d += 8) {
    for (int l = 0; l < 8; ++l) {
      acc[l] += a[d + l] * b[d + l];
    }
  }
  for (int l = 0; l < 8; ++l) {
    acc[l] += acc[l + 8];
  }
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

ATTN_ALWAYS_INLINE void axpy(float* __restrict y, float alpha, const float* __restrict x, int n) {
  for (int d = 0; d < n; ++d) {
    y[d] += alpha * x[d];
  }
}

ATTN_ALWAYS_INLINE void scale_vec(float* __restrict y, float alpha, int n) {
  for (int d = 0; d < n; ++d) {
    y[d] *= alpha;
  }
}

// Row pointers of keys [t0, t1) of sequence b, kv head kvh: fp32 caches are read in place,
// other dtypes are converted block run by block run into buf.
template <DType DT, Isa I>
ATTN_ALWAYS_INLINE void gather_rows(const KernelArgs& a, const void* cache, int b, int kvh, int t0,
                                    int t1, float* buf, const float** rows) {
  const int bs = a.block_size;
  const int D = a.head_dim;
  const int32_t* table = a.block_tables + int64_t(b) * a.max_blocks_per_seq;
  for (int j = t0; j < t1;) {
    const int slot = j % bs;
    const int run = std::min(t1 - j, bs - slot);
    const int64_t off = ((int64_t(table[j / bs]) * a.num_kv_heads + kvh) * bs + slot) * D;
    if constexpr (DT == DType::f32) {
      const float* p = static_cast<const float*>(cache) + off;
      for (int r = 0; r < run; ++r) {
        rows[j - t0 + r] = p + int64_t(r) * D;
      }
    } else {
      float* dst = buf + int64_t(j - t0) * D;
      convert_run<DT, I>(cache, off, run * D, dst);
      for (int r = 0; r < run; ++r) {
        rows[j - t0 + r] = dst + int64_t(r) * D;
      }
    }
    j += run;
  }
}

template <DType DT, Isa I>
ATTN_ALWAYS_INLINE void attend_impl(const KernelArgs& a, const WorkItem& it, int k_tile, Scratch& s) {
  const int D = a.head_dim;
  const int H = a.num_heads;
  const int ql = a.seq_q_len[it.b];
  const int kl = a.seq_k_len[it.b];
  const int nrows = it.row_end - it.row_begin;
  const int nh = it.heads;
  const int kvh = it.head_begin / a.group;
  const int64_t q_row0 = int64_t(a.seq_q_start[it.b]) + it.row_begin;

  int kb = 0;
  int ke = kl;
  if (it.part >= 0) {
    am::partition_bounds(it.part, a.partition, kl, &kb, &ke);
  }
  // Each row's visible keys inside this item's key range; the union drives the tile loop, so
  // fully masked tiles are never read.
  int ulo = INT_MAX;
  int uhi = INT_MIN;
  for (int r = 0; r < nrows; ++r) {
    int lo, hi;
    am::visible_range(a.mask, am::row_position(ql, kl, it.row_begin + r), kl, &lo, &hi);
    lo = am::imax(lo, kb);
    hi = am::imin(hi, ke);
    s.lo[std::size_t(r)] = lo;
    s.hi[std::size_t(r)] = hi;
    if (lo < hi) {
      ulo = am::imin(ulo, lo);
      uhi = am::imax(uhi, hi);
    }
  }

  float* __restrict q = s.q.data();
  float* __restrict acc = s.acc.data();
  am::OnlineSoftmax* sm = s.sm.data();
  for (int r = 0; r < nrows; ++r) {
    for (int g = 0; g < nh; ++g) {
      const int i = r * nh + g;
      convert_run<DT, I>(a.query, ((q_row0 + r) * H + it.head_begin + g) * D, D, q + int64_t(i) * D);
      std::fill(acc + int64_t(i) * D, acc + int64_t(i + 1) * D, 0.0f);
      sm[i] = am::OnlineSoftmax::empty();
    }
  }

  for (int t0 = ulo; t0 < uhi; t0 += k_tile) {
    const int t1 = am::imin(uhi, t0 + k_tile);
    gather_rows<DT, I>(a, a.key_cache, it.b, kvh, t0, t1, s.kv.data(), s.rows.data());
    for (int r = 0; r < nrows; ++r) {
      const int lo = am::imax(s.lo[std::size_t(r)], t0);
      const int hi = am::imin(s.hi[std::size_t(r)], t1);
      for (int g = 0; g < nh && lo < hi; ++g) {
        const int i = r * nh + g;
        const float* qi = q + int64_t(i) * D;
        float* sc = s.scores.data() + int64_t(i) * k_tile;
        float mx = am::neg_inf();
        for (int j = lo; j < hi; ++j) {
          const float x =
              am::apply_softcap(a.scale * dot(qi, s.rows[std::size_t(j - t0)], D), a.softcap);
          sc[j - t0] = x;
          mx = x > mx ? x : mx;
        }
        const float alpha = sm[i].update(mx);
        if (alpha != 1.0f) {
          scale_vec(acc + int64_t(i) * D, alpha, D);
        }
        float sum = 0.0f;
        for (int j = lo; j < hi; ++j) {
          const float p = sm[i].weight(sc[j - t0]);
          sc[j - t0] = p;
          sum += p;
        }
        sm[i].add(sum);
      }
    }
    gather_rows<DT, I>(a, a.value_cache, it.b, kvh, t0, t1, s.kv.data(), s.rows.data());
    for (int r = 0; r < nrows; ++r) {
      const int lo = am::imax(s.lo[std::size_t(r)], t0);
      const int hi = am::imin(s.hi[std::size_t(r)], t1);
      for (int g = 0; g < nh && lo < hi; ++g) {
        const int i = r * nh + g;
        const float* sc = s.scores.data() + int64_t(i) * k_tile;
        float* ai = acc + int64_t(i) * D;
        for (int j = lo; j < hi; ++j) {
          axpy(ai, sc[j - t0], s.rows[std::size_t(j - t0)], D);
        }
      }
    }
  }

  for (int r = 0; r < nrows; ++r) {
    for (int g = 0; g < nh; ++g) {
      const int i = r * nh + g;
      const int head = it.head_begin + g;
      const float inv = sm[i].inv_sum();
      const float* ai = acc + int64_t(i) * D;
      if (it.part < 0) {
        const int64_t row = q_row0 + r;
        const int64_t o = (row * H + head) * D;
        for (int d = 0; d < D; ++d) {
          store_from_float(DT, a.out, std::size_t(o + d), ai[d] * inv);
        }
        a.lse[row * H + head] = sm[i].lse();
      } else {
        const int64_t p = (int64_t(it.b) * H + head) * a.max_parts + it.part;
        a.part_m[p] = sm[i].m;
        a.part_l[p] = sm[i].l;
        float* po = a.part_o + p * D;
        for (int d = 0; d < D; ++d) {
          po[d] = ai[d] * inv;
        }
      }
    }
  }
}

template <DType DT, Isa I>
ATTN_ALWAYS_INLINE void combine_impl(const KernelArgs& a, int b, int head, float* __restrict tmp) {
  const int D = a.head_dim;
  const int H = a.num_heads;
  const int kl = a.seq_k_len[b];
  const int np = kl > 0 ? am::num_partitions(kl, a.partition) : 0;
  const int64_t p0 = (int64_t(b) * H + head) * a.max_parts;
  float m = am::neg_inf();
  for (int t = 0; t < np; ++t) {
    m = am::combine_max(m, a.part_m[p0 + t], a.part_l[p0 + t]);
  }
  std::fill(tmp, tmp + D, 0.0f);
  float wsum = 0.0f;
  for (int t = 0; t < np; ++t) {
    const float w = am::combine_weight(a.part_m[p0 + t], a.part_l[p0 + t], m);
    if (w > 0.0f) { // empty partitions contribute nothing (their o is never read)
      wsum += w;
      axpy(tmp, w, a.part_o + (p0 + t) * D, D);
    }
  }
  const float inv = wsum > 0.0f ? 1.0f / wsum : 0.0f;
  const int64_t row = a.seq_q_start[b];
  const int64_t o = (row * H + head) * D;
  for (int d = 0; d < D; ++d) {
    store_from_float(DT, a.out, std::size_t(o + d), tmp[d] * inv);
  }
  a.lse[row * H + head] = am::combine_lse(m, wsum);
}

template <DType DT, Isa I>
ATTN_ALWAYS_INLINE void convert_impl(const void* src, float* dst, std::size_t n) {
  constexpr std::size_t kChunk = 1 << 20;
  for (std::size_t i = 0; i < n; i += kChunk) {
    convert_run<DT, I>(src, int64_t(i), int(std::min(kChunk, n - i)), dst + i);
  }
}

// One set of entry points per (ISA, dtype); the ISA attribute applies to everything inlined.
#define ATTN_DEFINE_ENTRIES(ISA, ATTR)                                                             \
  template <DType DT>                                                                              \
  ATTR void attend_##ISA(const KernelArgs& a, const WorkItem& it, int k_tile, Scratch& s) {        \
    attend_impl<DT, Isa::ISA>(a, it, k_tile, s);                                                   \
  }                                                                                                \
  template <DType DT> ATTR void combine_##ISA(const KernelArgs& a, int b, int head, float* tmp) {  \
    combine_impl<DT, Isa::ISA>(a, b, head, tmp);                                                   \
  }                                                                                                \
  template <DType DT> ATTR void convert_##ISA(const void* src, float* dst, std::size_t n) {        \
    convert_impl<DT, Isa::ISA>(src, dst, n);                                                       \
  }

ATTN_DEFINE_ENTRIES(base, )
#if ATTN_CPU_MULTI_ISA
ATTN_DEFINE_ENTRIES(avx2, ATTN_TARGET_AVX2)
ATTN_DEFINE_ENTRIES(avx512, ATTN_TARGET_AVX512)
#endif

// Picks the entry for (isa, dtype) from the family F's three instantiations.
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

} // namespace

void attend(Isa isa, const KernelArgs& a, const WorkItem& it, int k_tile, Scratch& s) {
  ATTN_DISPATCH(attend, isa, a.dtype, a, it, k_tile, s);
}

void combine_partials(Isa isa, const KernelArgs& a, int b, int head, float* tmp) {
  ATTN_DISPATCH(combine, isa, a.dtype, a, b, head, tmp);
}

void convert_to_float(Isa isa, DType t, const void* src, float* dst, std::size_t n) {
  ATTN_DISPATCH(convert, isa, t, src, dst, n);
}

} // namespace attn::cpu
