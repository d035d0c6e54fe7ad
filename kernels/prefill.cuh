// Paged flash-attention prefill (SPEC.md): varlen query rows against K/V read through block
// tables, one pass with an online softmax, fp16/bf16 on tensor cores, fp32 on CUDA cores.
//
// What it computes, for every sequence b, query row i (0 <= i < q_len) and query head h: the
// row's position p = k_len - q_len + i (bottom-right), its visible keys [lo, hi) from
// attn_math::visible_range (causal, window left/right), s_j = softcap(scale * q.k_j),
// out = softmax(s) @ V and lse = log(sum exp(s)); a row with no visible key gets out = 0 and
// lse = -inf. Key j of sequence b is slot j % BLOCK_SIZE of page block_tables[b][j / BLOCK_SIZE];
// query head h reads kv head h / (num_heads / num_kv_heads).
//
// Work split: a CTA owns BLOCK_M consecutive query rows of one sequence and one query head. The
// host (src/backends/cuda/prefill_launch.cpp) lists the q tiles of every sequence in tile_map as
// pairs (sequence, first row), heaviest first. A CTA walks only the union of its rows' visible key
// ranges (attn_math::visible_range_rows) in tiles of BLOCK_N keys: a causal prefill touches about
// half of the keys and a sliding window only the window. Only boundary tiles, where some row of
// the CTA does not see every key of the tile, are masked element by element.
//
// Inside a CTA, warp w owns rows [w * RPW, (w + 1) * RPW) (RPW = BLOCK_M / WARPS = 16 * MT). The
// fp16/bf16 engine computes S = Q K^T and O += P V with mma.sync.m16n8k16 (fp32 accumulate): S
// stays in registers in the C-fragment layout, is turned into P in place and re-packed as the A
// fragment of the PV product (probabilities rounded to the input dtype, as FlashAttention 2). The
// fp32 engine keeps the same fragment layout but computes with FMAs from shared memory, with P
// going through a per-warp shared scratch.
//
// Launch (host: prefill_launch): grid (num_q_tiles, num_heads), block WARPS * 32 threads,
// dynamic shared memory (elements of the dtype, rows padded by 16 bytes against bank conflicts):
//   Q tile   BLOCK_M x (HEAD_DIM + PAD)
//   K, V     STAGES x BLOCK_N x (HEAD_DIM + PAD) each
//   fp32 only: P scratch WARPS x RPW x BLOCK_N floats
// K/V tiles are gathered row by row (each key row is contiguous in its page) with 16-byte
// cp.async; STAGES = 2 prefetches the next key tile while the current one is computed.
//
// Tunables (macros, set by the host per configuration):
//   DTYPE       0 fp32, 1 fp16, 2 bf16: storage type of q and out (and of the caches)
//   KV_DTYPE    0 (default): the caches have DTYPE; 1 fp8_e4m3, 2 fp8_e5m2: the K/V tiles are
//               gathered with plain loads and converted to DTYPE on their way to shared memory
//               (every fp8 value is exact in fp32, fp16 and bf16); the key scale is folded into
//               the score scale and the value scale into the output (kernel_common.cuh)
//   HEAD_DIM    elements per head row (a multiple of 16)
//   BLOCK_SIZE  tokens per KV page (any positive value; the gather divides by it)
//   BLOCK_M     query rows per CTA (the q tile; BLOCK_M / WARPS must be 16 or 32)
//   BLOCK_N     keys per tile (the k tile; a multiple of 16)
//   WARPS       warps per CTA
//   STAGES      1: load then compute; 2: cp.async double buffering of the K/V tiles
//
// No include guard, and the hooks ATTN_KERNEL_LINKAGE, ATTN_UNROLL, ATTN_DYNAMIC_SHARED and
// ATTN_EMULATE_HOST: tests/kernels/test_prefill_emulation.cpp runs this file on the CPU, where the
// tensor-core and cp.async helpers below call emulations of the PTX instructions. The element
// type, its conversions and the arguments shared with decode.cuh are in kernel_common.cuh.
#if !defined(DTYPE) || !defined(HEAD_DIM) || !defined(BLOCK_SIZE) || !defined(BLOCK_M) ||          \
    !defined(BLOCK_N) || !defined(WARPS) || !defined(STAGES)
#error "prefill.cuh needs DTYPE, HEAD_DIM, BLOCK_SIZE, BLOCK_M, BLOCK_N, WARPS and STAGES"
#endif

#include "kernel_common.cuh"

#ifndef ATTN_DYNAMIC_SHARED
#define ATTN_DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]
#endif
// A loop kept rolled (a rare path whose unrolled copies would only cost compile time).
#ifndef ATTN_UNROLL1
#if defined(ATTN_EMULATE_HOST)
#define ATTN_UNROLL1
#else
#define ATTN_UNROLL1 _Pragma("unroll 1")
#endif
#endif
// Partial unrolling of the fp32 engine's dot-product loops: fully unrolled, ptxas hoisted enough
// loads to spill at head_dim 80 on sm_80.
#ifndef ATTN_UNROLL4
#if defined(ATTN_EMULATE_HOST)
#define ATTN_UNROLL4
#else
#define ATTN_UNROLL4 _Pragma("unroll 4")
#endif
#endif

namespace attn_prefill {

using attn_kernel::cache_t;
using attn_kernel::elem_t;
using attn_kernel::store;

constexpr int D = HEAD_DIM;
constexpr int THREADS = WARPS * 32;
constexpr int RPW = BLOCK_M / WARPS; // query rows per warp
constexpr int MT = RPW / 16;         // 16-row fragments per warp
constexpr int NT = BLOCK_N / 8;      // 8-key fragments of a key tile
constexpr int DT = D / 8;            // 8-dim fragments of an output row
constexpr int ES = int(sizeof(elem_t));
constexpr int PAD = 16 / ES;     // row padding: 16 bytes
constexpr int LD = D + PAD;      // shared row stride in elements
constexpr int CPR = D * ES / 16; // 16-byte chunks per row

static_assert(D % 16 == 0 && D >= 16 && D <= 256, "HEAD_DIM must be a multiple of 16 up to 256");
static_assert(BLOCK_SIZE > 0, "BLOCK_SIZE must be positive");
static_assert(WARPS >= 1 && WARPS <= 16, "WARPS must be in [1, 16]");
static_assert(BLOCK_M % WARPS == 0 && (RPW == 16 || RPW == 32),
              "BLOCK_M / WARPS (rows per warp) must be 16 or 32");
static_assert(BLOCK_N % 16 == 0 && BLOCK_N >= 16 && BLOCK_N <= 128,
              "BLOCK_N must be a multiple of 16 up to 128");
static_assert(STAGES == 1 || STAGES == 2, "STAGES must be 1 or 2");

// ---- Instruction helpers (each has a CPU emulation in the test) --------------------------------

// 16 bytes global -> shared, asynchronously; zero-fills the destination when !valid (src is then
// not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
#if defined(ATTN_EMULATE_HOST)
  attn_emu_cp_async16(dst, src, valid);
#else
  const unsigned int sa = static_cast<unsigned int>(__cvta_generic_to_shared(dst));
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(src), "r"(n));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if !defined(ATTN_EMULATE_HOST)
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most N committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
#if !defined(ATTN_EMULATE_HOST)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

#if DTYPE != 0
// D = A B + C for one warp, m16n8k16, A row-major 16x16, B column-major 16x8, fp32 C/D. The
// fragment layout is the PTX ISA's (groupID g = lane / 4, t = lane % 4; low half = lower index):
//   a[0] = A[g][2t..2t+1]    a[1] = A[g+8][2t..2t+1]   a[2] = A[g][2t+8..]   a[3] = A[g+8][2t+8..]
//   b[0] = B[2t..2t+1][g]    b[1] = B[2t+8..2t+9][g]
//   c[0..1] = C[g][2t..2t+1] c[2..3] = C[g+8][2t..2t+1]
__device__ __forceinline__ void mma16816(float c[4], const unsigned int a[4],
                                         const unsigned int b[2]) {
#if defined(ATTN_EMULATE_HOST)
  attn_emu_mma16816(c, a, b, DTYPE);
#elif DTYPE == 1
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
               "{%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// Two floats rounded to the dtype and packed: lo in bits 0..15, hi in bits 16..31.
__device__ __forceinline__ unsigned int pack2(float lo, float hi) {
#if defined(ATTN_EMULATE_HOST)
  return attn_emu_pack2(lo, hi, DTYPE);
#elif DTYPE == 1
  unsigned int r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  unsigned int r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#endif
}

// Two consecutive 16-bit elements of shared memory as one 32-bit register.
__device__ __forceinline__ unsigned int ld32(const elem_t* p) {
  return *reinterpret_cast<const unsigned int*>(p);
}
// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: four 8x8 matrices of 16-bit elements, lane l
// giving the address of row l % 8 of matrix l / 8 (16-byte aligned). Register m of lane
// (g = lane / 4, t = lane % 4) receives elements [2t][g] (low half) and [2t+1][g] of matrix m:
// the transposed load, which turns key-major V rows into B fragments.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned int r[4], const elem_t* row) {
#if defined(ATTN_EMULATE_HOST)
  attn_emu_ldmatrix_x4_trans(r, row);
#else
  const unsigned int sa = static_cast<unsigned int>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(sa));
#endif
}
#endif

// ---- Arguments -------------------------------------------------------------------------------

// The kernel's arguments (rows = total_q for the fields of attn_kernel::PagedArgs); the host
// passes them one by one in the order of the prefill parameter list.
//   cu_seqlens_q, cu_seqlens_k: [batch + 1]  tile_map: [num_tiles, 2] (sequence, first row)
struct Args : attn_kernel::PagedArgs {
  const int* cu_seqlens_q;
  const int* cu_seqlens_k;
  const int* tile_map;
};

#if KV_DTYPE != 0
// An fp8 value (exact in every DTYPE) as the element's bits.
__device__ __forceinline__ unsigned int elem_bits(float f) {
#if DTYPE == 0
  return __float_as_uint(f);
#elif defined(ATTN_EMULATE_HOST) && DTYPE == 1
  return attn_emu_float_to_half(f);
#elif DTYPE == 1
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  return __float_as_uint(f) >> 16; // exact: an fp8 value has at most 4 significant bits
#endif
}

// 16 / ES fp8 bytes (one 16-byte chunk of the tile) converted to the dtype and stored; zeros
// when !valid (src is then not read). A plain load and store: cp.async copies bytes unchanged.
__device__ __forceinline__ void fp8_chunk(elem_t* dst, const cache_t* src, bool valid) {
  constexpr int N = 16 / ES; // elements of the chunk: 4 (fp32) or 8 (fp16, bf16)
  unsigned int bytes[2] = {0u, 0u};
  if (valid) {
    if (N == 8) {
      const uint2 w = __ldg(reinterpret_cast<const uint2*>(src));
      bytes[0] = w.x;
      bytes[1] = w.y;
    } else {
      bytes[0] = __ldg(reinterpret_cast<const unsigned int*>(src));
    }
  }
  unsigned int out[4];
  ATTN_UNROLL
  for (int p = 0; p < N / 2; ++p) { // two fp8 bytes at a time
    float lo, hi;
    attn_kernel::fp8x2_to_float(bytes[p / 2] >> (16 * (p % 2)), &lo, &hi);
    if (ES == 4) {
      out[2 * p] = elem_bits(lo);
      out[2 * p + 1] = elem_bits(hi);
    } else {
      out[p] = elem_bits(lo) | (elem_bits(hi) << 16);
    }
  }
  uint4 v;
  v.x = out[0];
  v.y = out[1];
  v.z = out[2];
  v.w = out[3];
  *reinterpret_cast<uint4*>(dst) = v;
}
#endif

// Gathers keys [k0, k0 + BLOCK_N) of the CTA's sequence and kv head into the K and V tiles; rows
// at or past khi are zero-filled (their scores are masked, and zero V keeps 0 * V finite).
__device__ __forceinline__ void load_kv(const Args& a, const int* table, int kvh, int k0, int khi,
                                        elem_t* ks, elem_t* vs) {
  for (int c = threadIdx.x; c < BLOCK_N * CPR; c += THREADS) {
    const int r = c / CPR;
    const int ch = c % CPR;
    const int j = k0 + r;
    const bool valid = j < khi;
    long long off = 0;
    if (valid) {
      off = attn_math::paged_kv_offset(table, BLOCK_SIZE, a.num_kv_heads, kvh, D, j);
    }
    const int e = ch * (16 / ES);
#if KV_DTYPE != 0
    fp8_chunk(ks + r * LD + e, a.k_cache + off + e, valid);
    fp8_chunk(vs + r * LD + e, a.v_cache + off + e, valid);
#else
    cp_async16(ks + r * LD + e, a.k_cache + off + e, valid);
    cp_async16(vs + r * LD + e, a.v_cache + off + e, valid);
#endif
  }
}

// ---- The two engines: S = Q K^T of a warp's rows, O += P V ------------------------------------

#if DTYPE != 0
__device__ __forceinline__ void scores(float s[MT][NT][4], const elem_t* qs, const elem_t* ks,
                                       int lane) {
  const int g = lane / 4;
  const int t = lane % 4;
  ATTN_UNROLL
  for (int mt = 0; mt < MT; ++mt) {
    ATTN_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
    }
  }
  ATTN_UNROLL
  for (int kk = 0; kk < D / 16; ++kk) {
    unsigned int af[MT][4];
    ATTN_UNROLL
    for (int mt = 0; mt < MT; ++mt) {
      const elem_t* q0 = qs + (mt * 16 + g) * LD + kk * 16 + 2 * t;
      af[mt][0] = ld32(q0);
      af[mt][1] = ld32(q0 + 8 * LD);
      af[mt][2] = ld32(q0 + 8);
      af[mt][3] = ld32(q0 + 8 * LD + 8);
    }
    ATTN_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      // B = K^T: B[k][n] = K[key n][dim k], so a B register is two adjacent dims of one key row.
      const elem_t* k0 = ks + (nt * 8 + g) * LD + kk * 16 + 2 * t;
      const unsigned int bf[2] = {ld32(k0), ld32(k0 + 8)};
      ATTN_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        mma16816(s[mt][nt], af[mt], bf);
      }
    }
  }
}

__device__ __forceinline__ void accumulate_pv(float o[MT][DT][4], const float p[MT][NT][4],
                                              const elem_t* vs, float*, int lane) {
  ATTN_UNROLL
  for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
    // The C fragments of key fragments 2kk and 2kk+1 are exactly the A fragment of keys
    // [16kk, 16kk + 16): row g / g+8, keys 2t..2t+1 and 2t+8..2t+9.
    unsigned int af[MT][4];
    ATTN_UNROLL
    for (int mt = 0; mt < MT; ++mt) {
      af[mt][0] = pack2(p[mt][2 * kk][0], p[mt][2 * kk][1]);
      af[mt][1] = pack2(p[mt][2 * kk][2], p[mt][2 * kk][3]);
      af[mt][2] = pack2(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]);
      af[mt][3] = pack2(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]);
    }
    ATTN_UNROLL
    for (int dt = 0; dt < DT; dt += 2) {
      // B = V: B[k][n] = V[key k][dim n]; a register holds keys 2t and 2t+1 of dim g. One
      // transposed ldmatrix loads dims [8dt, 8dt + 16) of the 16 keys: matrices (keys 0-7,
      // dims 0-7), (keys 8-15, dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, dims 8-15).
      unsigned int bf[4];
      ldmatrix_x4_trans(bf, vs + (kk * 16 + lane % 8 + 8 * ((lane / 8) % 2)) * LD + dt * 8 +
                                8 * (lane / 16));
      ATTN_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        mma16816(o[mt][dt], af[mt], bf);
        mma16816(o[mt][dt + 1], af[mt], bf + 2);
      }
    }
  }
}
#else
// fp32: the same fragment ownership (row g / g+8, columns 2t and 2t+1 of each 8-wide fragment),
// computed with FMAs from shared memory.
__device__ __forceinline__ void scores(float s[MT][NT][4], const float* qs, const float* ks,
                                       int lane) {
  const int g = lane / 4;
  const int t = lane % 4;
  ATTN_UNROLL
  for (int mt = 0; mt < MT; ++mt) {
    const float* q0 = qs + (mt * 16 + g) * LD;
    const float* q1 = q0 + 8 * LD;
    for (int nt = 0; nt < NT; ++nt) {
      const float* k0 = ks + (nt * 8 + 2 * t) * LD;
      const float* k1 = k0 + LD;
      float a00 = 0.0f, a01 = 0.0f, a10 = 0.0f, a11 = 0.0f;
      ATTN_UNROLL4
      for (int d = 0; d < D; ++d) {
        a00 += q0[d] * k0[d];
        a01 += q0[d] * k1[d];
        a10 += q1[d] * k0[d];
        a11 += q1[d] * k1[d];
      }
      s[mt][nt][0] = a00;
      s[mt][nt][1] = a01;
      s[mt][nt][2] = a10;
      s[mt][nt][3] = a11;
    }
  }
}

// P goes through the warp's scratch (RPW x BLOCK_N floats) so every lane can read whole rows.
__device__ __forceinline__ void accumulate_pv(float o[MT][DT][4], const float p[MT][NT][4],
                                              const float* vs, float* scratch, int lane) {
  const int g = lane / 4;
  const int t = lane % 4;
  ATTN_UNROLL
  for (int mt = 0; mt < MT; ++mt) {
    ATTN_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      float* r0 = scratch + (mt * 16 + g) * BLOCK_N + nt * 8 + 2 * t;
      r0[0] = p[mt][nt][0];
      r0[1] = p[mt][nt][1];
      r0[8 * BLOCK_N] = p[mt][nt][2];
      r0[8 * BLOCK_N + 1] = p[mt][nt][3];
    }
  }
  __syncwarp();
  ATTN_UNROLL
  for (int mt = 0; mt < MT; ++mt) {
    const float* p0 = scratch + (mt * 16 + g) * BLOCK_N;
    const float* p1 = p0 + 8 * BLOCK_N;
    ATTN_UNROLL4
    for (int k = 0; k < BLOCK_N; ++k) {
      const float w0 = p0[k];
      const float w1 = p1[k];
      const float* vrow = vs + k * LD + 2 * t;
      ATTN_UNROLL
      for (int dt = 0; dt < DT; ++dt) {
        const float v0 = vrow[dt * 8];
        const float v1 = vrow[dt * 8 + 1];
        o[mt][dt][0] += w0 * v0;
        o[mt][dt][1] += w0 * v1;
        o[mt][dt][2] += w1 * v0;
        o[mt][dt][3] += w1 * v1;
      }
    }
  }
  __syncwarp(); // the scratch is rewritten by the next tile
}
#endif

// Whether the V tile holds a NaN or an infinity (a 32-bit word with every exponent bit of one of
// its elements set). A CTA-wide barrier: every thread scans its share of the 16-byte chunks.
__device__ __forceinline__ bool tile_has_special(const elem_t* vs) {
#if DTYPE == 0
  constexpr unsigned int LO = 0x7f800000u, HI = 0x7f800000u;
#elif DTYPE == 1
  constexpr unsigned int LO = 0x7c00u, HI = 0x7c000000u;
#else
  constexpr unsigned int LO = 0x7f80u, HI = 0x7f800000u;
#endif
  int any = 0;
  for (int c = threadIdx.x; c < BLOCK_N * CPR; c += THREADS) {
    const uint4 w = *reinterpret_cast<const uint4*>(vs + (c / CPR) * LD + (c % CPR) * (16 / ES));
    const unsigned int words[4] = {w.x, w.y, w.z, w.w};
    ATTN_UNROLL
    for (int i = 0; i < 4; ++i) {
      any |= ((words[i] & LO) == LO || (words[i] & HI) == HI) ? 1 : 0;
    }
  }
  return __syncthreads_or(any) != 0;
}

// O += P V over the keys each row sees, skipping the others: the path of a boundary tile whose V
// holds a NaN or an infinity, where a masked key's zero probability would still make 0 * NaN in
// the engines above. The lane that owns output (row, dims 2t and 2t + 1) takes the row's
// probability of key k from the lane of its quad that holds it (keys 2t' and 2t' + 1 of each
// 8-key fragment). Slow (a shuffle per key and row, the products one by one) and rare; the key
// loop stays rolled, picking the fragment by compares, so that it adds little code.
__device__ __forceinline__ void accumulate_pv_visible(float o[MT][DT][4], const float p[MT][NT][4],
                                                      const elem_t* vs, int k0,
                                                      const int rlo[MT][2], const int rhi[MT][2],
                                                      int lane) {
  const int t = lane % 4;
  ATTN_UNROLL1
  for (int k = 0; k < BLOCK_N; ++k) {
    const int j = k0 + k;
    const elem_t* vrow = vs + k * LD + 2 * t;
    ATTN_UNROLL
    for (int mt = 0; mt < MT; ++mt) {
      ATTN_UNROLL
      for (int half = 0; half < 2; ++half) {
        float mine = 0.0f; // this lane's probability of key k's pair in the row, if it holds it
        ATTN_UNROLL
        for (int nt = 0; nt < NT; ++nt) {
          const float pair = k % 2 == 0 ? p[mt][nt][2 * half] : p[mt][nt][2 * half + 1];
          mine = nt == k / 8 ? pair : mine;
        }
        const float w = __shfl_sync(0xffffffffu, mine, (lane & ~3) | (k % 8 / 2));
        if (rlo[mt][half] <= j && j < rhi[mt][half]) {
          ATTN_UNROLL
          for (int dt = 0; dt < DT; ++dt) {
            o[mt][dt][2 * half] += w * attn_kernel::to_float(vrow[dt * 8]);
            o[mt][dt][2 * half + 1] += w * attn_kernel::to_float(vrow[dt * 8 + 1]);
          }
        }
      }
    }
  }
}

// Max over the 4 lanes of a quad (the lanes that share a row).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Shared memory bytes of one CTA (the host computes the same number in prefill_launch.cpp).
constexpr int SMEM_BYTES =
    (BLOCK_M + 2 * STAGES * BLOCK_N) * LD * ES + (DTYPE == 0 ? WARPS * RPW * BLOCK_N * 4 : 0);

__device__ __forceinline__ void prefill_tile(const Args& a) {
  ATTN_DYNAMIC_SHARED(unsigned char, smem_raw);
  elem_t* qs = reinterpret_cast<elem_t*>(smem_raw);
  elem_t* ks_base = qs + BLOCK_M * LD;
  elem_t* vs_base = ks_base + STAGES * BLOCK_N * LD;
  float* scratch_base = reinterpret_cast<float*>(vs_base + STAGES * BLOCK_N * LD);

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int b = a.tile_map[2 * blockIdx.x];
  const int row0 = a.tile_map[2 * blockIdx.x + 1];
  const int h = blockIdx.y;
  const int kvh = h / (a.num_heads / a.num_kv_heads);
  const int q_start = a.cu_seqlens_q[b];
  const int q_len = a.cu_seqlens_q[b + 1] - q_start;
  const int k_len = a.cu_seqlens_k[b + 1] - a.cu_seqlens_k[b];
  const int rows = attn_math::imin(BLOCK_M, q_len - row0); // valid rows of this tile (>= 1)
  const int* table = a.table_row(b);

  // Union of the visible ranges, and the ranges of the first and last row: a key tile inside
  // [lo_last, hi_first) is visible from every row and needs no per-element mask.
  int lo, hi, lo_first, hi_first, lo_last, hi_last;
  attn_math::visible_range_rows(a.mask, q_len, k_len, row0, row0 + rows, &lo, &hi);
  attn_math::visible_range(a.mask, attn_math::row_position(q_len, k_len, row0), k_len, &lo_first,
                           &hi_first);
  attn_math::visible_range(a.mask, attn_math::row_position(q_len, k_len, row0 + rows - 1), k_len,
                           &lo_last, &hi_last);

  // Q tile (rows past the sequence are zero).
  for (int c = tid; c < BLOCK_M * CPR; c += THREADS) {
    const int r = c / CPR;
    const int e = (c % CPR) * (16 / ES);
    const bool valid = r < rows;
    const long long off =
        valid ? (static_cast<long long>(q_start + row0 + r) * a.num_heads + h) * D : 0;
    cp_async16(qs + r * LD + e, a.q + off + e, valid);
  }
  if (lo < hi) {
    load_kv(a, table, kvh, lo, hi, ks_base, vs_base);
  }
  cp_async_commit();

  // This thread's rows (within the sequence) and their visible ranges; rows past the sequence
  // see nothing.
  int rlo[MT][2], rhi[MT][2];
  ATTN_UNROLL
  for (int mt = 0; mt < MT; ++mt) {
    ATTN_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int i = row0 + warp * RPW + mt * 16 + g + 8 * half;
      if (i < q_len) {
        attn_math::visible_range(a.mask, attn_math::row_position(q_len, k_len, i), k_len,
                                 &rlo[mt][half], &rhi[mt][half]);
      } else {
        rlo[mt][half] = 0;
        rhi[mt][half] = 0;
      }
    }
  }

  float o[MT][DT][4];
  attn_math::OnlineSoftmax2 st[MT][2]; // base 2: scores are kept times log2(e)
  ATTN_UNROLL
  for (int mt = 0; mt < MT; ++mt) {
    st[mt][0] = attn_math::OnlineSoftmax2::empty();
    st[mt][1] = attn_math::OnlineSoftmax2::empty();
    ATTN_UNROLL
    for (int dt = 0; dt < DT; ++dt) {
      o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.0f;
    }
  }

  const float qk_scale = a.scale * a.key_scale(kvh); // an fp8 cache's key scale folded in
  const float scale_log2 = qk_scale * attn_math::kLog2e;
  const elem_t* qw = qs + warp * RPW * LD;
  float* scratch = scratch_base + warp * RPW * BLOCK_N;
  int it = 0;
  for (int k0 = lo; k0 < hi; k0 += BLOCK_N, ++it) {
    const int buf = STAGES == 2 ? (it & 1) : 0;
    if (STAGES == 2 && k0 + BLOCK_N < hi) {
      load_kv(a, table, kvh, k0 + BLOCK_N, hi, ks_base + (buf ^ 1) * BLOCK_N * LD,
              vs_base + (buf ^ 1) * BLOCK_N * LD);
      cp_async_commit();
      cp_async_wait<1>(); // the current tile (and Q) have landed; the next is in flight
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const elem_t* ks = ks_base + buf * BLOCK_N * LD;
    const elem_t* vs = vs_base + buf * BLOCK_N * LD;

    float s[MT][NT][4];
    scores(s, qw, ks, lane);
    const bool full = lo_last <= k0 && k0 + BLOCK_N <= hi_first;
    ATTN_UNROLL
    for (int mt = 0; mt < MT; ++mt) {
      ATTN_UNROLL
      for (int nt = 0; nt < NT; ++nt) {
        ATTN_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int half = e / 2;
          const int j = k0 + nt * 8 + 2 * t + (e % 2);
          float v =
              a.softcap > 0.0f
                  ? attn_math::apply_softcap(s[mt][nt][e] * qk_scale, a.softcap) * attn_math::kLog2e
                  : s[mt][nt][e] * scale_log2;
          if (!full && !(rlo[mt][half] <= j && j < rhi[mt][half])) {
            v = attn_math::neg_inf();
          }
          s[mt][nt][e] = v;
        }
      }
      ATTN_UNROLL
      for (int half = 0; half < 2; ++half) {
        float mx = attn_math::neg_inf();
        ATTN_UNROLL
        for (int nt = 0; nt < NT; ++nt) {
          mx = fmaxf(mx, fmaxf(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]));
        }
        mx = quad_max(mx);
        const float alpha = st[mt][half].update(mx);
        ATTN_UNROLL
        for (int dt = 0; dt < DT; ++dt) {
          o[mt][dt][2 * half] *= alpha;
          o[mt][dt][2 * half + 1] *= alpha;
        }
        ATTN_UNROLL
        for (int nt = 0; nt < NT; ++nt) {
          ATTN_UNROLL
          for (int e = 2 * half; e < 2 * half + 2; ++e) {
            const float w = st[mt][half].weight(s[mt][nt][e]);
            st[mt][half].add(w); // this lane's part of the row sum; summed over the quad at the end
            s[mt][nt][e] = w;
          }
        }
      }
    }
    // A boundary tile may hold a NaN or an infinity at a key that some rows do not see.
    if (!full && tile_has_special(vs)) {
      accumulate_pv_visible(o, s, vs, k0, rlo, rhi, lane);
    } else {
      accumulate_pv(o, s, vs, scratch, lane);
    }
    __syncthreads(); // every warp is done with this buffer before it is refilled
    if (STAGES == 1 && k0 + BLOCK_N < hi) {
      load_kv(a, table, kvh, k0 + BLOCK_N, hi, ks_base, vs_base);
      cp_async_commit();
    }
  }
  cp_async_wait<0>(); // nothing may be in flight when the CTA exits (Q when the range is empty)

  ATTN_UNROLL
  for (int mt = 0; mt < MT; ++mt) {
    ATTN_UNROLL
    for (int half = 0; half < 2; ++half) {
      const attn_math::OnlineSoftmax2 row = {st[mt][half].m, quad_sum(st[mt][half].l)};
      const float inv = row.inv_sum() * a.value_scale(kvh); // an fp8 cache's values scale last
      const int i = row0 + warp * RPW + mt * 16 + g + 8 * half;
      if (i < q_len) {
        const long long rh = static_cast<long long>(q_start + i) * a.num_heads + h;
        elem_t* orow = a.out + rh * D + 2 * t;
        ATTN_UNROLL
        for (int dt = 0; dt < DT; ++dt) {
          store(orow + dt * 8, o[mt][dt][2 * half] * inv);
          store(orow + dt * 8 + 1, o[mt][dt][2 * half + 1] * inv);
        }
        if (t == 0) {
          a.lse[rh] = row.lse();
        }
      }
    }
  }
}

} // namespace attn_prefill

ATTN_KERNEL_LINKAGE __global__ void __launch_bounds__(attn_prefill::THREADS, 1)
    prefill(attn_prefill::elem_t* out, float* lse, const attn_prefill::elem_t* __restrict__ q,
            const attn_prefill::cache_t* __restrict__ k_cache,
            const attn_prefill::cache_t* __restrict__ v_cache, const int* __restrict__ block_tables,
            const int* __restrict__ cu_seqlens_q, const int* __restrict__ cu_seqlens_k,
            const int* __restrict__ tile_map, int num_heads, int num_kv_heads,
            int max_blocks_per_seq, float scale, float softcap, int causal, int window_left,
            int window_right, const float* __restrict__ k_scale, const float* __restrict__ v_scale,
            int num_kv_scales) {
  const attn_prefill::Args a = {{out,
                                 lse,
                                 q,
                                 k_cache,
                                 v_cache,
                                 block_tables,
                                 num_heads,
                                 num_kv_heads,
                                 max_blocks_per_seq,
                                 scale,
                                 softcap,
                                 {causal, window_left, window_right},
                                 k_scale,
                                 v_scale,
                                 num_kv_scales},
                                cu_seqlens_q,
                                cu_seqlens_k,
                                tile_map};
  attn_prefill::prefill_tile(a);
}
