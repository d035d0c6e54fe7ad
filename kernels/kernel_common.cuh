// What decode.cuh and prefill.cuh share: the hook defaults, the element type that DTYPE selects
// with its load (to_float) and rounding store, and the paged-attention arguments both take.
//
// Everything here lands in namespace attn_kernel, declared wherever this file is included.
// No include guard: the emulation tests (tests/kernels/test_*_emulation.cpp) include a kernel
// file once per configuration, each time inside a different namespace and with different DTYPE,
// so the DTYPE-dependent part must be compiled again every time. Include it once per
// configuration (a kernel file and its namespace), after DTYPE is defined.
//   DTYPE  0 fp32, 1 fp16, 2 bf16: storage type of q, the K/V caches and out
#include "attn_math.h"

// Hooks the emulation tests override (cuda_emulator.h); each default is set once per
// translation unit.
#ifndef ATTN_KERNEL_LINKAGE
#define ATTN_KERNEL_LINKAGE extern "C"
#endif
#ifndef ATTN_UNROLL
#define ATTN_UNROLL _Pragma("unroll")
#endif

#if !defined(DTYPE)
#error "kernel_common.cuh needs DTYPE defined"
#endif

namespace attn_kernel {

#if DTYPE == 0
typedef float elem_t;
#elif DTYPE == 1 || DTYPE == 2
typedef unsigned short elem_t; // raw fp16 / bf16 bits; converted below without cuda_fp16.h
#else
#error "DTYPE must be 0 (fp32), 1 (fp16) or 2 (bf16)"
#endif

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(unsigned short h) {
#if DTYPE == 1 && defined(ATTN_EMULATE_HOST)
  return attn_emu_half_to_float(h);
#elif DTYPE == 1
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  return __uint_as_float(static_cast<unsigned int>(h) << 16); // bf16 is the top half of fp32
#endif
}

__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(unsigned short* p, float v) {
#if DTYPE == 1 && defined(ATTN_EMULATE_HOST)
  *p = attn_emu_float_to_half(v);
#elif DTYPE == 1
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  *p = h;
#else
  // Round to nearest even, as src/model/dtype.h does on the host; NaN stays a quiet NaN.
  const unsigned int u = __float_as_uint(v);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0u) {
    *p = static_cast<unsigned short>((u >> 16) | 0x0040u);
  } else {
    *p = static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
#endif
}

// The arguments every kernel family takes; each family adds its sequence description (decode:
// context_lens; prefill: cu_seqlens and the tile map). The host passes them one by one, in the
// order of each kernel's parameter list.
//   out: [rows, num_heads, HEAD_DIM]   lse: [rows, num_heads] fp32   q: [rows, num_heads, HEAD_DIM]
//   k_cache, v_cache: [blocks, num_kv_heads, BLOCK_SIZE, HEAD_DIM]
//   block_tables: [batch, max_blocks_per_seq]
struct PagedArgs {
  elem_t* out;
  float* lse;
  const elem_t* q;
  const elem_t* k_cache;
  const elem_t* v_cache;
  const int* block_tables;
  int num_heads;
  int num_kv_heads;
  int max_blocks_per_seq;
  float scale;
  float softcap;
  attn_math::Mask mask;

  // Row of the block table of sequence b.
  __device__ __forceinline__ const int* table_row(int b) const {
    return block_tables + static_cast<long long>(b) * max_blocks_per_seq;
  }
};

} // namespace attn_kernel
