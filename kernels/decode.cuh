// Paged decode attention (SPEC.md): one query row per sequence against its paged K/V cache,
// as one pass (decode_v1) or split over partitions of the context plus a combine (decode_v2).
//
// What it computes, per sequence b and query head h (q_len = 1, so the row's position is
// p = k_len - 1): the visible key range [lo, hi) from attn_math::visible_range, scores
// s_j = softcap(scale * q.k_j), out = softmax(s) @ V and lse = log(sum exp(s)); rows with no
// visible key get out = 0 and lse = -inf.
//
// Launch shapes (the host computes them in src/backends/cuda/decode_launch.cpp); the main kernels
// are declared __launch_bounds__(THREADS, 1): with THREADS alone ptxas aims at an occupancy target
// and spilled some configurations at 48-64 registers.
//   decode_v1         grid (GROUP ? num_kv_heads : num_heads, batch),        block THREADS
//   decode_v2         grid (GROUP ? num_kv_heads : num_heads, batch, parts), block THREADS
//   decode_v2_reduce  grid (num_heads, batch), block REDUCE_THREADS, dynamic smem max_parts
//                     floats rounded up to a multiple of 4
//   static shared memory of the main kernels: (THREADS / 32) * (HEAD_DIM + 2) floats
//   (the cross-warp combine); none depends on the context length.
//
// Inside a CTA, THREADS are split into subgroups of TK lanes; a subgroup reads one key row
// (HEAD_DIM elements, VEC per lane-load) at a time, so a warp reads 32 / TK consecutive slots
// of a page. Each subgroup keeps its own online softmax (m, l, unnormalised accumulator) over
// keys lo + sg, lo + sg + NSG, ...; at the end subgroups merge by warp shuffles, warps through
// shared memory. Keys are processed UNROLL at a time so loads of K and V are in flight together.
//
// Tunables (macros, set by the host per configuration):
//   DTYPE       0 fp32, 1 fp16, 2 bf16: storage type of q and out (and of the caches)
//   KV_DTYPE    0 (default): the caches have DTYPE; 1 fp8_e4m3, 2 fp8_e5m2: one byte per cache
//               element, converted in registers as it is loaded; the key scale is folded into
//               the query row and the value scale into the output (kernel_common.cuh)
//   HEAD_DIM    elements per head row (a multiple of VEC)
//   BLOCK_SIZE  tokens per KV page
//   THREADS     threads per block (a multiple of 32, at least TK)
//   VEC         cache elements per vector load (VEC * sizeof(cache element) is 2, 4, 8 or 16
//               bytes)
//   GROUP       0: a CTA per query head; 1: a CTA per KV head serving its GQA query heads,
//               reading K/V once for all of them
//   GQA         query heads per KV head, compiled in when GROUP = 1 (at most 8)
//   PARTITION   0: emit decode_v1; > 0: emit decode_v2 and its reduce with this many tokens
//               per partition (a multiple of BLOCK_SIZE)
//
// No include guard: tests/kernels/test_decode_emulation.cpp includes this file once per
// configuration (each in its own namespace) and runs it on the CPU with one coroutine per CUDA
// thread; the hooks ATTN_KERNEL_LINKAGE, ATTN_UNROLL, ATTN_DYNAMIC_SHARED and ATTN_EMULATE_HOST
// exist for it. The element type, its conversions and the arguments shared with prefill.cuh are
// in kernel_common.cuh.
#if !defined(DTYPE) || !defined(HEAD_DIM) || !defined(BLOCK_SIZE) || !defined(THREADS) ||          \
    !defined(VEC)
#error "decode.cuh needs DTYPE, HEAD_DIM, BLOCK_SIZE, THREADS and VEC defined"
#endif

#include "kernel_common.cuh"

#ifndef ATTN_DYNAMIC_SHARED
#define ATTN_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif
#ifndef GROUP
#define GROUP 0
#endif
#ifndef GQA
#define GQA 1
#endif
#ifndef PARTITION
#define PARTITION 0
#endif
#ifndef REDUCE_THREADS
#define REDUCE_THREADS 128
#endif

namespace attn_decode {

using attn_kernel::cache_t;
using attn_kernel::elem_t;
using attn_kernel::store;
using attn_kernel::to_float;

__host__ __device__ constexpr int next_pow2(int x) {
  return x <= 1 ? 1 : 2 * next_pow2((x + 1) / 2);
}

constexpr int D = HEAD_DIM;
constexpr int NCHUNK = D / VEC;                           // vector chunks in one row
constexpr int TK = NCHUNK >= 32 ? 32 : next_pow2(NCHUNK); // lanes that share one key
constexpr int NCH = (NCHUNK + TK - 1) / TK;               // chunks per lane
constexpr bool FULL = NCHUNK % TK == 0;                   // every lane owns NCH chunks
constexpr int EPL = NCH * VEC;                            // row elements per lane
constexpr int NSG = THREADS / TK;                         // key subgroups per CTA
constexpr int NWARP = THREADS / 32;
constexpr int G = GROUP ? GQA : 1;                  // query heads per CTA
constexpr int UNROLL = G >= 8 ? 1 : G >= 4 ? 2 : 4; // keys in flight per subgroup
constexpr int VBYTES = VEC * int(sizeof(cache_t));

static_assert(D > 0 && D % VEC == 0, "HEAD_DIM must be a multiple of VEC");
static_assert(VBYTES == 2 || VBYTES == 4 || VBYTES == 8 || VBYTES == 16,
              "VEC * sizeof(cache element) must be 2, 4, 8 or 16 bytes");
static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024,
              "THREADS must be a multiple of 32 in [32, 1024]");
static_assert(TK <= 32 && 32 % TK == 0, "a key subgroup must tile a warp");
static_assert(BLOCK_SIZE > 0, "BLOCK_SIZE must be positive");
static_assert(GROUP == 0 || (GQA >= 1 && GQA <= 8), "GROUP = 1 supports 1 to 8 heads per KV head");
static_assert(PARTITION >= 0 && PARTITION % BLOCK_SIZE == 0,
              "PARTITION must be a multiple of BLOCK_SIZE");
static_assert(REDUCE_THREADS % 32 == 0 && REDUCE_THREADS <= 1024, "REDUCE_THREADS: warps");

template <int BYTES> struct VecBits;
template <> struct VecBits<2> { typedef unsigned short type; };
template <> struct VecBits<4> { typedef unsigned int type; };
template <> struct VecBits<8> { typedef uint2 type; };
template <> struct VecBits<16> { typedef uint4 type; };
typedef VecBits<VBYTES>::type vec_t;

// 32-bit word w of a vector (w is a compile-time constant after unrolling, so this is a
// register pick; a union here made ptxas spill).
__device__ __forceinline__ unsigned int word(unsigned short v, int) { return v; }
__device__ __forceinline__ unsigned int word(unsigned int v, int) { return v; }
__device__ __forceinline__ unsigned int word(const uint2& v, int w) { return w == 0 ? v.x : v.y; }
__device__ __forceinline__ unsigned int word(const uint4& v, int w) {
  return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}

// The VEC elements of a loaded K or V vector, as float (fp8 bytes two at a time).
__device__ __forceinline__ void unpack(const vec_t& v, float (&f)[VEC]) {
#if KV_DTYPE != 0
  ATTN_UNROLL
  for (int i = 0; i < VEC; i += 2) {
    attn_kernel::fp8x2_to_float(word(v, i / 4) >> (8 * (i % 4)), &f[i], &f[i + 1]);
  }
#elif DTYPE == 0
  ATTN_UNROLL
  for (int i = 0; i < VEC; ++i) {
    f[i] = __uint_as_float(word(v, i));
  }
#else
  ATTN_UNROLL
  for (int i = 0; i < VEC; ++i) {
    f[i] = to_float(static_cast<unsigned short>((word(v, i / 2) >> (16 * (i % 2))) & 0xffffu));
  }
#endif
}

// v, or zeros when !keep: the V vectors of the keys past the range (a re-read of the last key,
// whose infinity times their zero weight would be NaN). A select per 32-bit word.
__device__ __forceinline__ unsigned short keep_if(unsigned short v, bool keep) {
  return keep ? v : static_cast<unsigned short>(0);
}
__device__ __forceinline__ unsigned int keep_if(unsigned int v, bool keep) { return keep ? v : 0u; }
__device__ __forceinline__ uint2 keep_if(const uint2& v, bool keep) {
  uint2 r;
  r.x = keep ? v.x : 0u;
  r.y = keep ? v.y : 0u;
  return r;
}
__device__ __forceinline__ uint4 keep_if(const uint4& v, bool keep) {
  uint4 r;
  r.x = keep ? v.x : 0u;
  r.y = keep ? v.y : 0u;
  r.z = keep ? v.z : 0u;
  r.w = keep ? v.w : 0u;
  return r;
}

__device__ __forceinline__ vec_t load_vec(const cache_t* p) {
  return __ldg(reinterpret_cast<const vec_t*>(p));
}

__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  }
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, off);
  }
  return v;
}

// Arguments of both decode kernels (rows = batch for the fields of attn_kernel::PagedArgs); the
// host passes them one by one in the order of ATTN_DECODE_PARAMS.
//   context_lens: [batch]
struct Common : attn_kernel::PagedArgs {
  const int* context_lens;
};

// Split-KV workspace: m, l: [batch, num_heads, max_parts]; o: [batch, num_heads, max_parts, D].
struct Partials {
  float* m;
  float* l;
  float* o;
  int max_parts;
};

// Attention of the CTA's G query heads over keys [klo, khi). Writes either the final row
// (out, lse) or, when `part` is not null, the partial (m, l, normalised o) of partition t.
__device__ __forceinline__ void attend(const Common& c, int b, int head0, int kvh, int klo, int khi,
                                       const Partials* part, int t, bool final_row) {
  __shared__ float sm_o[NWARP][D];
  __shared__ float sm_m[NWARP];
  __shared__ float sm_l[NWARP];

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int sg = tid / TK; // subgroup: which key of a step this thread reads
  const int sl = tid % TK; // lane inside the subgroup: which chunks of the row

  // q rows of the CTA's heads, pre-multiplied by the scale (and an fp8 cache's key scale); chunk
  // k of this lane is row elements [(sl + k * TK) * VEC, ... + VEC).
  const float qscale = c.scale * c.key_scale(kvh);
  float qr[G][EPL];
  float acc[G][EPL];
  attn_math::OnlineSoftmax st[G];
  ATTN_UNROLL
  for (int g = 0; g < G; ++g) {
    st[g] = attn_math::OnlineSoftmax::empty();
    const elem_t* qrow = c.q + (static_cast<long long>(b) * c.num_heads + head0 + g) * D;
    ATTN_UNROLL
    for (int k = 0; k < NCH; ++k) {
      const int ch = sl + k * TK;
      ATTN_UNROLL
      for (int i = 0; i < VEC; ++i) {
        qr[g][k * VEC + i] = ch < NCHUNK ? to_float(qrow[ch * VEC + i]) * qscale : 0.0f;
        acc[g][k * VEC + i] = 0.0f;
      }
    }
  }

  const int* table = c.table_row(b);
  for (int base = klo; base < khi; base += UNROLL * NSG) {
    vec_t kv[UNROLL][NCH];
    vec_t vv[UNROLL][NCH];
    bool valid[UNROLL];
    // Issue every load of the step before any arithmetic, so they overlap in flight. Keys past
    // khi re-read the last key (already in flight) and are masked out below: branch-free, as
    // nested divergent branches made ptxas spill convergence state to local memory.
    ATTN_UNROLL
    for (int u = 0; u < UNROLL; ++u) {
      const int j_raw = base + u * NSG + sg;
      valid[u] = j_raw < khi;
      const int j = valid[u] ? j_raw : khi - 1;
      const long long row =
          attn_math::paged_kv_offset(table, BLOCK_SIZE, c.num_kv_heads, kvh, D, j);
      ATTN_UNROLL
      for (int k = 0; k < NCH; ++k) {
        const int ch = sl + k * TK;
        if (FULL || ch < NCHUNK) {
          kv[u][k] = load_vec(c.k_cache + row + ch * VEC);
          vv[u][k] = load_vec(c.v_cache + row + ch * VEC);
        } else {
          kv[u][k] = vec_t(); // lanes past the row: zeros, never written out
          vv[u][k] = vec_t();
        }
      }
    }
    float s[UNROLL][G];
    ATTN_UNROLL
    for (int u = 0; u < UNROLL; ++u) {
      ATTN_UNROLL
      for (int g = 0; g < G; ++g) {
        float dot = 0.0f;
        ATTN_UNROLL
        for (int k = 0; k < NCH; ++k) {
          if (FULL || sl + k * TK < NCHUNK) {
            float kf[VEC];
            unpack(kv[u][k], kf);
            ATTN_UNROLL
            for (int i = 0; i < VEC; ++i) {
              dot += qr[g][k * VEC + i] * kf[i];
            }
          }
        }
        // Every lane of the warp takes part in the shuffles (the loop bounds are uniform).
        ATTN_UNROLL
        for (int off = TK / 2; off > 0; off >>= 1) {
          dot += __shfl_xor_sync(0xffffffffu, dot, off);
        }
        s[u][g] = valid[u] ? attn_math::apply_softcap(dot, c.softcap) : attn_math::neg_inf();
      }
    }
    ATTN_UNROLL
    for (int g = 0; g < G; ++g) {
      float block_max = attn_math::neg_inf();
      ATTN_UNROLL
      for (int u = 0; u < UNROLL; ++u) {
        block_max = fmaxf(block_max, s[u][g]);
      }
      const float alpha = st[g].update(block_max);
      ATTN_UNROLL
      for (int e = 0; e < EPL; ++e) {
        acc[g][e] *= alpha;
      }
      ATTN_UNROLL
      for (int u = 0; u < UNROLL; ++u) {
        const float w = st[g].weight(s[u][g]); // 0 for the masked (-inf) keys, whose V is 0
        st[g].add(w);
        ATTN_UNROLL
        for (int k = 0; k < NCH; ++k) {
          float vf[VEC];
          unpack(keep_if(vv[u][k], valid[u]), vf);
          ATTN_UNROLL
          for (int i = 0; i < VEC; ++i) {
            acc[g][k * VEC + i] += w * vf[i];
          }
        }
      }
    }
  }

  // Merge the subgroups of each warp: lanes tid and tid ^ off (off >= TK) hold the same chunks.
  ATTN_UNROLL
  for (int off = TK; off < 32; off <<= 1) {
    ATTN_UNROLL
    for (int g = 0; g < G; ++g) {
      const float m_o = __shfl_xor_sync(0xffffffffu, st[g].m, off);
      const float l_o = __shfl_xor_sync(0xffffffffu, st[g].l, off);
      const float m_new = fmaxf(st[g].m, m_o);
      const float f_self = attn_math::combine_scale(st[g].m, st[g].l, m_new);
      const float f_o = attn_math::combine_scale(m_o, l_o, m_new);
      ATTN_UNROLL
      for (int e = 0; e < EPL; ++e) {
        const float a_o = __shfl_xor_sync(0xffffffffu, acc[g][e], off);
        acc[g][e] = acc[g][e] * f_self + a_o * f_o;
      }
      st[g].l = st[g].l * f_self + l_o * f_o;
      st[g].m = m_new;
    }
  }

  // Merge the warps through shared memory, one head at a time (keeps shared memory small).
  // Fully unrolled: a run-time head index would move acc and st to local memory.
  ATTN_UNROLL
  for (int g = 0; g < G; ++g) {
    if (lane < TK) {
      ATTN_UNROLL
      for (int k = 0; k < NCH; ++k) {
        const int ch = sl + k * TK;
        if (FULL || ch < NCHUNK) {
          ATTN_UNROLL
          for (int i = 0; i < VEC; ++i) {
            sm_o[warp][ch * VEC + i] = acc[g][k * VEC + i];
          }
        }
      }
    }
    if (lane == 0) {
      sm_m[warp] = st[g].m;
      sm_l[warp] = st[g].l;
    }
    __syncthreads();
    float m = attn_math::neg_inf();
    ATTN_UNROLL
    for (int w = 0; w < NWARP; ++w) {
      m = attn_math::combine_max(m, sm_m[w], sm_l[w]);
    }
    float l = 0.0f;
    ATTN_UNROLL
    for (int w = 0; w < NWARP; ++w) {
      l += attn_math::combine_weight(sm_m[w], sm_l[w], m);
    }
    const attn_math::OnlineSoftmax row = {m, l};
    const float inv = row.inv_sum() * c.value_scale(kvh); // an fp8 cache's values scale last
    const int h = head0 + g;
    const long long bh = static_cast<long long>(b) * c.num_heads + h;
    for (int d = tid; d < D; d += THREADS) {
      float a = 0.0f;
      ATTN_UNROLL
      for (int w = 0; w < NWARP; ++w) {
        // An empty warp state has f = 0 and a zero accumulator, so it adds exactly 0.
        a += sm_o[w][d] * attn_math::combine_scale(sm_m[w], sm_l[w], m);
      }
      if (final_row) {
        store(c.out + bh * D + d, a * inv);
      } else {
        part->o[(bh * part->max_parts + t) * D + d] = a * inv;
      }
    }
    if (tid == 0) {
      if (final_row) {
        c.lse[bh] = row.lse();
      } else {
        part->m[bh * part->max_parts + t] = l > 0.0f ? m : attn_math::neg_inf();
        part->l[bh * part->max_parts + t] = l;
      }
    }
    __syncthreads(); // shared memory is reused by the next head
  }
}

// The CTA's first query head and its KV head.
__device__ __forceinline__ void cta_heads(const Common& c, int* head0, int* kvh) {
#if GROUP
  *kvh = blockIdx.x;
  *head0 = blockIdx.x * GQA;
#else
  *head0 = blockIdx.x;
  *kvh = blockIdx.x / (c.num_heads / c.num_kv_heads);
#endif
}

} // namespace attn_decode

#define ATTN_DECODE_PARAMS                                                                         \
  attn_decode::elem_t *out, float *lse, const attn_decode::elem_t *__restrict__ q,                 \
      const attn_decode::cache_t *__restrict__ k_cache,                                            \
      const attn_decode::cache_t *__restrict__ v_cache, const int *__restrict__ block_tables,      \
      const int *__restrict__ context_lens, int num_heads, int num_kv_heads,                       \
      int max_blocks_per_seq, float scale, float softcap, int causal, int window_left,             \
      int window_right, const float *__restrict__ k_scale, const float *__restrict__ v_scale,      \
      int num_kv_scales

#define ATTN_DECODE_COMMON                                                                         \
  attn_decode::Common c = {{out,                                                                   \
                            lse,                                                                   \
                            q,                                                                     \
                            k_cache,                                                               \
                            v_cache,                                                               \
                            block_tables,                                                          \
                            num_heads,                                                             \
                            num_kv_heads,                                                          \
                            max_blocks_per_seq,                                                    \
                            scale,                                                                 \
                            softcap,                                                               \
                            {causal, window_left, window_right},                                   \
                            k_scale,                                                               \
                            v_scale,                                                               \
                            num_kv_scales},                                                        \
                           context_lens}

#if PARTITION == 0

ATTN_KERNEL_LINKAGE __global__ void __launch_bounds__(THREADS, 1) decode_v1(ATTN_DECODE_PARAMS) {
  ATTN_DECODE_COMMON;
  const int b = blockIdx.y;
  int head0, kvh;
  attn_decode::cta_heads(c, &head0, &kvh);
  const int k_len = context_lens[b];
  int lo, hi;
  attn_math::visible_range(c.mask, attn_math::row_position(1, k_len, 0), k_len, &lo, &hi);
  attn_decode::attend(c, b, head0, kvh, lo, hi, nullptr, 0, /*final_row=*/true);
}

#else

// Partition t of sequence b; a sequence with a single partition writes its final row here
// and the reduce leaves it alone, so short contexts pay no combine.
ATTN_KERNEL_LINKAGE __global__ void __launch_bounds__(THREADS, 1)
    decode_v2(ATTN_DECODE_PARAMS, float* ws_m, float* ws_l, float* ws_o, int max_parts) {
  ATTN_DECODE_COMMON;
  const int b = blockIdx.y;
  const int t = blockIdx.z;
  const int k_len = context_lens[b];
  const int parts = attn_math::num_partitions(k_len, PARTITION);
  if (t >= parts) {
    return; // past this sequence's context: the reduce reads only `parts` partials
  }
  int head0, kvh;
  attn_decode::cta_heads(c, &head0, &kvh);
  int lo, hi, pb, pe;
  attn_math::visible_range(c.mask, attn_math::row_position(1, k_len, 0), k_len, &lo, &hi);
  attn_math::partition_bounds(t, PARTITION, k_len, &pb, &pe);
  const attn_decode::Partials part = {ws_m, ws_l, ws_o, max_parts};
  attn_decode::attend(c, b, head0, kvh, attn_math::imax(lo, pb), attn_math::imin(hi, pe), &part, t,
                      /*final_row=*/parts == 1);
}

// Combines the partials of (b, h) as SPEC.md "Split-KV partials"; w holds one weight per
// partition in dynamic shared memory (max_parts floats, rounded up to a multiple of 4: the
// compiled loop over w reads 16-byte groups, past `parts` in its remainder).
ATTN_KERNEL_LINKAGE __global__ void __launch_bounds__(REDUCE_THREADS)
    decode_v2_reduce(attn_decode::elem_t* out, float* lse, const int* __restrict__ context_lens,
                     const float* __restrict__ ws_m, const float* __restrict__ ws_l,
                     const float* __restrict__ ws_o, int num_heads, int max_parts) {
  ATTN_DYNAMIC_SHARED(float, w);
  __shared__ float red[REDUCE_THREADS / 32];
  const int h = blockIdx.x;
  const int b = blockIdx.y;
  const int tid = threadIdx.x;
  const int parts = attn_math::num_partitions(context_lens[b], PARTITION);
  if (parts == 1) {
    return; // decode_v2 wrote this row directly
  }
  const long long bh = static_cast<long long>(b) * num_heads + h;
  const float* pm = ws_m + bh * max_parts;
  const float* pl = ws_l + bh * max_parts;
  const float* po = ws_o + bh * max_parts * attn_decode::D;

  float m = attn_math::neg_inf();
  for (int t = tid; t < parts; t += REDUCE_THREADS) {
    m = attn_math::combine_max(m, pm[t], pl[t]);
  }
  m = attn_decode::warp_max(m);
  if (tid % 32 == 0) {
    red[tid / 32] = m;
  }
  __syncthreads();
  m = attn_math::neg_inf();
  for (int i = 0; i < REDUCE_THREADS / 32; ++i) {
    m = fmaxf(m, red[i]);
  }
  __syncthreads(); // red is reused for the sum

  float sum = 0.0f;
  for (int t = tid; t < parts; t += REDUCE_THREADS) {
    const float wt = attn_math::combine_weight(pm[t], pl[t], m);
    w[t] = wt;
    sum += wt;
  }
  sum = attn_decode::warp_sum(sum);
  if (tid % 32 == 0) {
    red[tid / 32] = sum;
  }
  __syncthreads();
  sum = 0.0f;
  for (int i = 0; i < REDUCE_THREADS / 32; ++i) {
    sum += red[i];
  }
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int d = tid; d < attn_decode::D; d += REDUCE_THREADS) {
    float a = 0.0f;
    for (int t = 0; t < parts; ++t) {
      if (w[t] > 0.0f) { // empty partitions may hold anything; they weigh nothing
        a += w[t] * po[static_cast<long long>(t) * attn_decode::D + d];
      }
    }
    attn_decode::store(out + bh * attn_decode::D + d, a * inv);
  }
  if (tid == 0) {
    lse[bh] = attn_math::combine_lse(m, sum);
  }
}

#endif
