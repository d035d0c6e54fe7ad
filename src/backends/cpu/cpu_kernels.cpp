// The CPU kernel loops. A key tile's rows are converted to fp32 once into a small scratch buffer
// (fp32 caches are read in place). With few query vectors per tile, Q.K runs four keys at a time
// and P.V keeps 64 output lanes in registers; with four or more (a GQA group, a prefill q tile)
// the K tile is transposed and both products run as 4-vector blocks that share each K/V load.
// The vector code uses GCC vector extensions (simd.h), which the compiler maps to the ISA; each
// loop body is compiled three times (baseline x86-64, x86-64-v3, x86-64-v4) and chosen at run
// time. All softmax, mask and paged-address math comes from kernels/attn_math.h.
#include "src/backends/cpu/cpu_kernels.h"

#include <algorithm>
#include <climits>

#include "src/backends/cpu/simd.h"

namespace attn::cpu {

namespace am = attn_math;

void size_scratch(Scratch& s, int max_rows, int max_heads, int head_dim, int k_tile) {
  const std::size_t vectors = std::size_t(max_rows) * std::size_t(max_heads);
  s.q.resize(vectors * std::size_t(head_dim));
  s.acc.resize(vectors * std::size_t(head_dim));
  s.ld = (k_tile + 31) / 32 * 32;
  s.scores.resize(vectors * std::size_t(s.ld));
  s.kt.resize(std::size_t(head_dim) * std::size_t(s.ld));
  s.kv.resize(std::size_t(k_tile) * std::size_t(head_dim));
  s.rows.resize(std::size_t(k_tile));
  s.sm.resize(vectors);
  s.lo.resize(std::size_t(max_rows));
  s.hi.resize(std::size_t(max_rows));
}

namespace {

// dot(q, k_j) for four keys at once: four independent FMA chains and one load of q per step.
// n is a multiple of 8 (SPEC head_dim).
ATTN_ALWAYS_INLINE void dot4(const float* __restrict q, const float* const* k, int n, float* out) {
  f32x16 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  int d = 0;
  for (; d + 16 <= n; d += 16) {
    const f32x16 x = vload<f32x16>(q + d);
    a0 += x * vload<f32x16>(k[0] + d);
    a1 += x * vload<f32x16>(k[1] + d);
    a2 += x * vload<f32x16>(k[2] + d);
    a3 += x * vload<f32x16>(k[3] + d);
  }
  float t0 = hsum(a0), t1 = hsum(a1), t2 = hsum(a2), t3 = hsum(a3);
  if (d < n) { // the last 8
    const f32x8 x = vload<f32x8>(q + d);
    t0 += hsum(x * vload<f32x8>(k[0] + d));
    t1 += hsum(x * vload<f32x8>(k[1] + d));
    t2 += hsum(x * vload<f32x8>(k[2] + d));
    t3 += hsum(x * vload<f32x8>(k[3] + d));
  }
  out[0] = t0;
  out[1] = t1;
  out[2] = t2;
  out[3] = t3;
}

ATTN_ALWAYS_INLINE float dot(const float* __restrict a, const float* __restrict b, int n) {
  f32x16 a0 = {}, a1 = {};
  int d = 0;
  for (; d + 32 <= n; d += 32) {
    a0 += vload<f32x16>(a + d) * vload<f32x16>(b + d);
    a1 += vload<f32x16>(a + d + 16) * vload<f32x16>(b + d + 16);
  }
  for (; d + 16 <= n; d += 16) {
    a0 += vload<f32x16>(a + d) * vload<f32x16>(b + d);
  }
  float t = hsum(a0 + a1);
  if (d < n) {
    t += hsum(vload<f32x8>(a + d) * vload<f32x8>(b + d));
  }
  return t;
}

// acc_v += sum_j p_v[j] * rows[j] for NV query vectors at once (acc and p rows NV apart by D
// and ld): each V load feeds NV FMAs; 32 output lanes per pass, then 16 and 8 for the tail.
template <int NV>
ATTN_ALWAYS_INLINE void pv_block(float* __restrict acc, const float* __restrict p, int ld,
                                 const float* const* rows, int n, int D) {
  int d0 = 0;
  for (; d0 + 32 <= D; d0 += 32) {
    f32x16 t[NV][2];
    for (int v = 0; v < NV; ++v) {
      t[v][0] = vload<f32x16>(acc + int64_t(v) * D + d0);
      t[v][1] = vload<f32x16>(acc + int64_t(v) * D + d0 + 16);
    }
    for (int j = 0; j < n; ++j) {
      const f32x16 x0 = vload<f32x16>(rows[j] + d0);
      const f32x16 x1 = vload<f32x16>(rows[j] + d0 + 16);
      for (int v = 0; v < NV; ++v) {
        const float pj = p[int64_t(v) * ld + j];
        t[v][0] += pj * x0;
        t[v][1] += pj * x1;
      }
    }
    for (int v = 0; v < NV; ++v) {
      vstore(acc + int64_t(v) * D + d0, t[v][0]);
      vstore(acc + int64_t(v) * D + d0 + 16, t[v][1]);
    }
  }
  for (; d0 + 16 <= D; d0 += 16) {
    f32x16 t[NV];
    for (int v = 0; v < NV; ++v) {
      t[v] = vload<f32x16>(acc + int64_t(v) * D + d0);
    }
    for (int j = 0; j < n; ++j) {
      const f32x16 x = vload<f32x16>(rows[j] + d0);
      for (int v = 0; v < NV; ++v) {
        t[v] += p[int64_t(v) * ld + j] * x;
      }
    }
    for (int v = 0; v < NV; ++v) {
      vstore(acc + int64_t(v) * D + d0, t[v]);
    }
  }
  if (d0 < D) { // the last 8
    f32x8 t[NV];
    for (int v = 0; v < NV; ++v) {
      t[v] = vload<f32x8>(acc + int64_t(v) * D + d0);
    }
    for (int j = 0; j < n; ++j) {
      const f32x8 x = vload<f32x8>(rows[j] + d0);
      for (int v = 0; v < NV; ++v) {
        t[v] += p[int64_t(v) * ld + j] * x;
      }
    }
    for (int v = 0; v < NV; ++v) {
      vstore(acc + int64_t(v) * D + d0, t[v]);
    }
  }
}

// kt[d][j] = rows[j][d] for j < n, and 0 up to n32: the layout in which one vector load of kt
// holds 16 keys' component d, so scores need no horizontal sums.
ATTN_ALWAYS_INLINE void transpose_tile(const float* const* rows, int n, int n32, int D,
                                       float* __restrict kt, int ld) {
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int d = 0; d < D; ++d) {
      for (int jj = 0; jj < 8; ++jj) {
        kt[int64_t(d) * ld + j + jj] = rows[j + jj][d];
      }
    }
  }
  for (; j < n; ++j) {
    for (int d = 0; d < D; ++d) {
      kt[int64_t(d) * ld + j] = rows[j][d];
    }
  }
  for (int d = 0; d < D; ++d) {
    for (int jj = n; jj < n32; ++jj) {
      kt[int64_t(d) * ld + jj] = 0.0f;
    }
  }
}

// Scores of `nv` (1 to 4) consecutive query vectors against keys [0, n32) of the transposed tile:
// a 4 x 32 block of accumulators, one load of kt per 4 x 2 FMAs (GEMM micro-kernel shape).
template <int NV>
ATTN_ALWAYS_INLINE void scores_block(const float* __restrict q, int D, const float* __restrict kt,
                                     int ld, int n32, float* __restrict sc, int sc_ld) {
  for (int j0 = 0; j0 < n32; j0 += 32) {
    f32x16 c[NV][2] = {};
    for (int d = 0; d < D; ++d) {
      const f32x16 k0 = vload<f32x16>(kt + int64_t(d) * ld + j0);
      const f32x16 k1 = vload<f32x16>(kt + int64_t(d) * ld + j0 + 16);
      for (int v = 0; v < NV; ++v) {
        const float qv = q[int64_t(v) * D + d];
        c[v][0] += qv * k0;
        c[v][1] += qv * k1;
      }
    }
    for (int v = 0; v < NV; ++v) {
      vstore(sc + int64_t(v) * sc_ld + j0, c[v][0]);
      vstore(sc + int64_t(v) * sc_ld + j0 + 16, c[v][1]);
    }
  }
}

// acc += sum_j p[j] * rows[j] over n rows: 64 output lanes stay in registers across the rows
// (four independent FMA chains) instead of a load and store of acc per key.
ATTN_ALWAYS_INLINE void pv_accumulate(float* __restrict acc, const float* __restrict p,
                                      const float* const* rows, int n, int D) {
  int d0 = 0;
  for (; d0 + 64 <= D; d0 += 64) {
    f32x16 t0 = vload<f32x16>(acc + d0), t1 = vload<f32x16>(acc + d0 + 16);
    f32x16 t2 = vload<f32x16>(acc + d0 + 32), t3 = vload<f32x16>(acc + d0 + 48);
    for (int j = 0; j < n; ++j) {
      const float pj = p[j];
      const float* v = rows[j] + d0;
      t0 += pj * vload<f32x16>(v);
      t1 += pj * vload<f32x16>(v + 16);
      t2 += pj * vload<f32x16>(v + 32);
      t3 += pj * vload<f32x16>(v + 48);
    }
    vstore(acc + d0, t0);
    vstore(acc + d0 + 16, t1);
    vstore(acc + d0 + 32, t2);
    vstore(acc + d0 + 48, t3);
  }
  for (; d0 + 16 <= D; d0 += 16) {
    f32x16 t0 = vload<f32x16>(acc + d0);
    for (int j = 0; j < n; ++j) {
      t0 += p[j] * vload<f32x16>(rows[j] + d0);
    }
    vstore(acc + d0, t0);
  }
  if (d0 < D) { // the last 8
    f32x8 t0 = vload<f32x8>(acc + d0);
    for (int j = 0; j < n; ++j) {
      t0 += p[j] * vload<f32x8>(rows[j] + d0);
    }
    vstore(acc + d0, t0);
  }
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
    const int64_t off = am::paged_kv_offset(table, bs, a.num_kv_heads, kvh, D, j);
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

// Asks for keys [t0, t1) of K and V to be brought into L2 while the current tile is computed:
// blocks are scattered, so the hardware prefetcher would restart at every block.
template <DType DT>
ATTN_ALWAYS_INLINE void prefetch_rows(const KernelArgs& a, int b, int kvh, int t0, int t1) {
  const int bs = a.block_size;
  const int64_t elem_bytes = int64_t(dtype_size(DT));
  const int64_t row_bytes = int64_t(a.head_dim) * elem_bytes;
  const int32_t* table = a.block_tables + int64_t(b) * a.max_blocks_per_seq;
  for (int j = t0; j < t1;) {
    const int slot = j % bs;
    const int run = std::min(t1 - j, bs - slot);
    const int64_t off =
        am::paged_kv_offset(table, bs, a.num_kv_heads, kvh, a.head_dim, j) * elem_bytes;
    const char* k = static_cast<const char*>(a.key_cache) + off;
    const char* v = static_cast<const char*>(a.value_cache) + off;
    for (int64_t o = 0; o < run * row_bytes; o += 64) {
      __builtin_prefetch(k + o, 0, 2);
      __builtin_prefetch(v + o, 0, 2);
    }
    j += run;
  }
}

constexpr int kTransposeMinVectors = 4;

template <DType DT, Isa I>
ATTN_ALWAYS_INLINE void attend_impl(const KernelArgs& a, const WorkItem& it, int k_tile,
                                    Scratch& s) {
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

  const int nq = nrows * nh;
  const int ld = s.ld;
  // Past a handful of query vectors per tile, transposing K pays for itself.
  const bool transposed = nq >= kTransposeMinVectors;
  float* __restrict q = s.q.data();
  float* __restrict acc = s.acc.data();
  am::OnlineSoftmax* sm = s.sm.data();
  for (int r = 0; r < nrows; ++r) {
    for (int g = 0; g < nh; ++g) {
      const int i = r * nh + g;
      convert_run<DT, I>(a.query, ((q_row0 + r) * H + it.head_begin + g) * D, D,
                         q + int64_t(i) * D);
      std::fill(acc + int64_t(i) * D, acc + int64_t(i + 1) * D, 0.0f);
      sm[i] = am::OnlineSoftmax::empty();
    }
  }

  for (int t0 = ulo; t0 < uhi; t0 += k_tile) {
    const int t1 = am::imin(uhi, t0 + k_tile);
    prefetch_rows<DT>(a, it.b, kvh, t1, am::imin(uhi, t1 + k_tile));
    gather_rows<DT, I>(a, a.key_cache, it.b, kvh, t0, t1, s.kv.data(), s.rows.data());
    if (transposed) {
      // Many query vectors share this tile: transpose it once and score every vector against
      // the whole tile; masked entries are computed but never used.
      const int n32 = (t1 - t0 + 31) / 32 * 32;
      transpose_tile(s.rows.data(), t1 - t0, n32, D, s.kt.data(), ld);
      int i = 0;
      for (; i + 4 <= nq; i += 4) {
        scores_block<4>(q + int64_t(i) * D, D, s.kt.data(), ld, n32,
                        s.scores.data() + int64_t(i) * ld, ld);
      }
      for (; i < nq; ++i) {
        scores_block<1>(q + int64_t(i) * D, D, s.kt.data(), ld, n32,
                        s.scores.data() + int64_t(i) * ld, ld);
      }
    }
    for (int r = 0; r < nrows; ++r) {
      const int lo = am::imax(s.lo[std::size_t(r)], t0);
      const int hi = am::imin(s.hi[std::size_t(r)], t1);
      for (int g = 0; g < nh && lo < hi; ++g) {
        const int i = r * nh + g;
        const float* qi = q + int64_t(i) * D;
        float* sc = s.scores.data() + int64_t(i) * ld;
        const float* const* kr = s.rows.data();
        int j = lo;
        if (!transposed) {
          for (; j + 4 <= hi; j += 4) {
            dot4(qi, kr + (j - t0), D, sc + (j - t0));
          }
          for (; j < hi; ++j) {
            sc[j - t0] = dot(qi, kr[j - t0], D);
          }
        }
        float mx = am::neg_inf();
        for (j = lo; j < hi; ++j) {
          const float x = am::apply_softcap(a.scale * sc[j - t0], a.softcap);
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
    if (transposed) {
      // Probabilities of masked keys become 0, so that blocks of four query vectors can share
      // each V load over the whole tile.
      const int n = t1 - t0;
      for (int r = 0; r < nrows; ++r) {
        const int lo = am::imax(s.lo[std::size_t(r)], t0) - t0;
        const int hi = am::imin(s.hi[std::size_t(r)], t1) - t0;
        for (int g = 0; g < nh; ++g) {
          float* sc = s.scores.data() + int64_t(r * nh + g) * ld;
          for (int j = 0; j < n; ++j) {
            sc[j] = (j >= lo && j < hi) ? sc[j] : 0.0f;
          }
        }
      }
      int i = 0;
      for (; i + 4 <= nq; i += 4) {
        pv_block<4>(acc + int64_t(i) * D, s.scores.data() + int64_t(i) * ld, ld, s.rows.data(), n,
                    D);
      }
      for (; i < nq; ++i) {
        pv_accumulate(acc + int64_t(i) * D, s.scores.data() + int64_t(i) * ld, s.rows.data(), n, D);
      }
      continue;
    }
    for (int r = 0; r < nrows; ++r) {
      const int lo = am::imax(s.lo[std::size_t(r)], t0);
      const int hi = am::imin(s.hi[std::size_t(r)], t1);
      for (int g = 0; g < nh && lo < hi; ++g) {
        const int i = r * nh + g;
        const float* sc = s.scores.data() + int64_t(i) * ld;
        pv_accumulate(acc + int64_t(i) * D, sc + (lo - t0), s.rows.data() + (lo - t0), hi - lo, D);
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
