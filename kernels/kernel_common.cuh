// What decode.cuh and prefill.cuh share: the hook defaults, the element type that DTYPE selects
// with its load (to_float) and rounding store, and the paged-attention arguments both take.
//
// Everything here lands in namespace attn_kernel, declared wherever this file is included.
// No include guard: the emulation tests (tests/kernels/test_*_emulation.cpp) include a kernel
// file once per configuration, each time inside a different namespace and with different DTYPE,
// so the DTYPE-dependent part must be compiled again every time. Include it once per
// configuration (a kernel file and its namespace), after DTYPE is defined.
//   DTYPE     0 fp32, 1 fp16, 2 bf16: storage type of q and out, and of the K/V caches unless
//   KV_DTYPE  (default 0) is 1 (fp8_e4m3) or 2 (fp8_e5m2): one byte per cache element, which
//             stands for its value times k_scale / v_scale of its KV head (SPEC.md "fp8 KV
//             caches"; PagedArgs::key_scale)
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
#ifndef KV_DTYPE
#define KV_DTYPE 0
#endif

namespace attn_kernel {

#if DTYPE == 0
typedef float elem_t;
#elif DTYPE == 1 || DTYPE == 2
typedef unsigned short elem_t; // raw fp16 / bf16 bits; converted below without cuda_fp16.h
#else
#error "DTYPE must be 0 (fp32), 1 (fp16) or 2 (bf16)"
#endif

#if KV_DTYPE == 0
typedef elem_t cache_t;
#elif KV_DTYPE == 1 || KV_DTYPE == 2
typedef unsigned char cache_t; // raw fp8 bytes
#else
#error "KV_DTYPE must be 0 (the query dtype), 1 (fp8_e4m3) or 2 (fp8_e5m2)"
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

// IEEE half bits as float, whatever DTYPE is (the fp8 conversions go through half).
__device__ __forceinline__ float half_bits_to_float(unsigned short h) {
#if defined(ATTN_EMULATE_HOST)
  return attn_emu_half_to_float(h);
#else
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#endif
}

#if KV_DTYPE != 0
// One fp8 byte's value, exact in float, without fp8 instructions: E5M2 is the top byte of an
// fp16; an E4M3 value's exponent and mantissa bits placed in an fp16's (bits 7 to 13) give the
// value / 256, subnormals included, and S.1111.111 is NaN.
__device__ __forceinline__ float fp8_to_float(unsigned int b) {
#if KV_DTYPE == 2
  return half_bits_to_float(static_cast<unsigned short>((b & 0xffu) << 8));
#else
  const unsigned int mag = b & 0x7fu;
  const float v =
      half_bits_to_float(static_cast<unsigned short>(((b & 0x80u) << 8) | (mag << 7))) * 256.0f;
  return mag == 0x7fu ? __uint_as_float(0x7fc00000u) : v;
#endif
}

// Two fp8 bytes (bits 0-7 and 8-15 of `two`) as floats; sm_89 and later convert the pair to
// half2 in one instruction (PTX cvt.rn.f16x2.e4m3x2 / e5m2x2, exact: every fp8 value is a half).
__device__ __forceinline__ void fp8x2_to_float(unsigned int two, float* lo, float* hi) {
#if !defined(ATTN_EMULATE_HOST) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned int h2;
  const unsigned short in = static_cast<unsigned short>(two & 0xffffu);
#if KV_DTYPE == 1
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(in));
#else
  asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h2) : "h"(in));
#endif
  *lo = half_bits_to_float(static_cast<unsigned short>(h2 & 0xffffu));
  *hi = half_bits_to_float(static_cast<unsigned short>(h2 >> 16));
#else
  *lo = fp8_to_float(two & 0xffu);
  *hi = fp8_to_float((two >> 8) & 0xffu);
#endif
}
#endif

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
//   k_cache, v_cache: [blocks, num_kv_heads, BLOCK_SIZE, HEAD_DIM] of cache_t
//   block_tables: [batch, max_blocks_per_seq]
//   k_scale, v_scale: fp8 caches: [num_kv_scales] (1: per tensor, num_kv_heads: per KV head);
//   read only when KV_DTYPE != 0
struct PagedArgs {
  elem_t* out;
  float* lse;
  const elem_t* q;
  const cache_t* k_cache;
  const cache_t* v_cache;
  const int* block_tables;
  int num_heads;
  int num_kv_heads;
  int max_blocks_per_seq;
  float scale;
  float softcap;
  attn_math::Mask mask;
  const float* k_scale;
  const float* v_scale;
  int num_kv_scales;

  // The dequantisation scales of KV head kvh (1 for caches of the query dtype).
  __device__ __forceinline__ float key_scale(int kvh) const { return scale_at(k_scale, kvh); }
  __device__ __forceinline__ float value_scale(int kvh) const { return scale_at(v_scale, kvh); }
  __device__ __forceinline__ float scale_at(const float* s, int kvh) const {
#if KV_DTYPE == 0
    (void)s;
    (void)kvh;
    return 1.0f;
#else
    return s[num_kv_scales == 1 ? 0 : kvh];
#endif
  }

  // Row of the block table of sequence b.
  __device__ __forceinline__ const int* table_row(int b) const {
    return block_tables + static_cast<long long>(b) * max_blocks_per_seq;
  }
};

} // namespace attn_kernel
