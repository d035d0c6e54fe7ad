// A CPU emulation of the CUDA device environment for running kernels/*.cuh in tests: each CUDA
// thread is a coroutine, and a shuffle, __syncwarp or __syncthreads is a CTA-wide barrier (valid
// for kernels in which every thread meets the same barriers in the same order). Also emulates
// the PTX instructions the prefill kernel uses (mma.sync m16n8k16, packed conversions, cp.async).
//
// The coroutines switch stacks with a few instructions of their own on x86-64 (emu_switch
// below), with ucontext's swapcontext elsewhere. swapcontext saves and restores the signal mask,
// a system call per switch: with a switch per thread per barrier, the emulation tests spent half
// their time in the kernel (16 of 52 CPU-seconds on the 2-core CI machine).
#pragma once

#include <ucontext.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "src/model/dtype.h"

namespace emu {

struct Dim {
  unsigned x = 0, y = 0, z = 0;
};

#if defined(__x86_64__) && defined(__GNUC__)
#define ATTN_EMU_OWN_SWITCH 1
// emu_switch(&from_sp, to_sp): pushes the System V callee-saved registers, stores the stack
// pointer in *from_sp, takes to_sp as the stack and pops the registers that stack saved (weak: a
// program of several files that include this header keeps one copy).
extern "C" void emu_switch(void** from_sp, void* to_sp);
asm(R"(
  .text
  .weak emu_switch
  .type emu_switch, @function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_switch, .-emu_switch
)");
#endif

struct State {
#if ATTN_EMU_OWN_SWITCH
  std::vector<void*> sp; // each thread's saved stack pointer
  void* scheduler_sp = nullptr;
#else
  std::vector<ucontext_t> ctx;
  ucontext_t scheduler{};
#endif
  std::vector<std::unique_ptr<char[]>> stacks;
  std::vector<char> finished;
  std::vector<float> slots;                   // shuffle exchange, one per thread
  std::vector<std::array<uint32_t, 6>> frags; // mma fragment exchange (a[4], b[2]), per thread
  std::vector<const void*> rows;              // ldmatrix row addresses, per thread
  std::vector<float> dynamic_smem;
  std::function<void()> body;
  int current = 0;
  Dim block;
};

inline State& state() {
  static State s;
  return s;
}

inline Dim thread_idx() { return {unsigned(state().current), 0, 0}; }
inline Dim block_idx() { return state().block; }

// Returns to the scheduler; it resumes this thread after every other thread got here too.
inline void barrier() {
  State& s = state();
#if ATTN_EMU_OWN_SWITCH
  emu_switch(&s.sp[std::size_t(s.current)], s.scheduler_sp);
#else
  swapcontext(&s.ctx[std::size_t(s.current)], &s.scheduler);
#endif
}

// __shfl_sync: every lane reads the value lane `src` of its warp gave.
inline float shfl(float v, int src) {
  State& s = state();
  const int t = s.current;
  s.slots[std::size_t(t)] = v;
  barrier();
  const float r = s.slots[std::size_t((t & ~31) | (src & 31))];
  barrier(); // nobody overwrites a slot before every lane has read
  return r;
}

inline float shfl_xor(float v, int off) { return shfl(v, (state().current & 31) ^ off); }

// __syncthreads_or: a barrier that returns whether any thread of the CTA gave a nonzero pred.
inline int syncthreads_or(int pred) {
  State& s = state();
  s.slots[std::size_t(s.current)] = pred != 0 ? 1.0f : 0.0f;
  barrier();
  int any = 0;
  for (const float v : s.slots) {
    any |= v != 0.0f ? 1 : 0;
  }
  barrier();
  return any;
}

inline void trampoline() {
  State& s = state();
  s.body();
  s.finished[std::size_t(s.current)] = 1;
}

#if ATTN_EMU_OWN_SWITCH
// A thread's first frame: runs the body, then hands the CPU back for good (the scheduler never
// resumes a finished thread).
[[noreturn]] inline void fiber_entry() {
  trampoline();
  State& s = state();
  void* unused = nullptr;
  emu_switch(&unused, s.scheduler_sp);
  __builtin_unreachable();
}

// A stack whose first emu_switch "returns" into fiber_entry: six zero registers, then its
// address, then a slot where a caller's return address would be, so that fiber_entry starts
// with the stack pointer 8 past a 16-byte boundary, as after a call.
inline void* fiber_stack(char* base, std::size_t size) {
  auto top = (reinterpret_cast<std::uintptr_t>(base) + size) & ~std::uintptr_t(15);
  auto* slot = reinterpret_cast<void**>(top);
  *--slot = nullptr; // fiber_entry's (never used) return address
  *--slot = reinterpret_cast<void*>(&fiber_entry);
  for (int r = 0; r < 6; ++r) {
    *--slot = nullptr;
  }
  return slot;
}
#endif

// Runs `body` as a grid of CTAs of `threads` threads, one CTA after the other.
inline void launch(Dim grid, int threads, std::size_t dynamic_floats,
                   const std::function<void()>& body) {
  constexpr std::size_t kStack = 256 * 1024;
  State& s = state();
  s.body = body;
#if ATTN_EMU_OWN_SWITCH
  s.sp.assign(std::size_t(threads), nullptr);
#else
  s.ctx.assign(std::size_t(threads), ucontext_t{});
#endif
  s.finished.assign(std::size_t(threads), 0);
  s.slots.assign(std::size_t(threads), 0.0f);
  s.frags.assign(std::size_t(threads), {});
  s.rows.assign(std::size_t(threads), nullptr);
  s.dynamic_smem.assign(dynamic_floats + 1, 0.0f);
  while (s.stacks.size() < std::size_t(threads)) {
    s.stacks.push_back(std::make_unique<char[]>(kStack));
  }
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        s.block = {x, y, z};
        std::fill(s.finished.begin(), s.finished.end(), 0);
        for (int t = 0; t < threads; ++t) {
#if ATTN_EMU_OWN_SWITCH
          s.sp[std::size_t(t)] = fiber_stack(s.stacks[std::size_t(t)].get(), kStack);
#else
          ucontext_t& c = s.ctx[std::size_t(t)];
          getcontext(&c);
          c.uc_stack.ss_sp = s.stacks[std::size_t(t)].get();
          c.uc_stack.ss_size = kStack;
          c.uc_link = &s.scheduler;
          makecontext(&c, trampoline, 0);
#endif
        }
        for (int done = 0; done < threads;) {
          done = 0;
          for (int t = 0; t < threads; ++t) {
            if (!s.finished[std::size_t(t)]) {
              s.current = t;
#if ATTN_EMU_OWN_SWITCH
              emu_switch(&s.scheduler_sp, s.sp[std::size_t(t)]);
#else
              swapcontext(&s.scheduler, &s.ctx[std::size_t(t)]);
#endif
            }
            done += s.finished[std::size_t(t)];
          }
        }
      }
    }
  }
}

template <typename T> T ldg(const T* p) { return *p; }

// One 16-bit element of an fp16 (dtype 1) or bf16 (dtype 2) register half, as float.
inline float half_bits_to_float(uint32_t bits, int dtype) {
  const auto h = static_cast<uint16_t>(bits & 0xffffu);
  return dtype == 1 ? attn::half_to_float(h) : attn::bf16_to_float(h);
}

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: a warp-collective product. Every lane
// deposits its fragments; each lane then reads A and B back through the PTX ISA fragment layout
// (groupID g = lane / 4, t = lane % 4):
//   A[r][k]: lane (r % 8) * 4 + (k % 8) / 2, register (r / 8) + 2 * (k / 8), half k % 2
//   B[k][n]: lane n * 4 + (k % 8) / 2,       register k / 8,                 half k % 2
//   C/D[r][n]: lane (r % 8) * 4 + n / 2,     element 2 * (r / 8) + n % 2
// so a kernel that packs its fragments in any other order computes a wrong product here.
inline void mma16816(float c[4], const uint32_t a[4], const uint32_t b[2], int dtype) {
  State& s = state();
  const int t = s.current;
  auto& mine = s.frags[std::size_t(t)];
  for (int i = 0; i < 4; ++i) {
    mine[std::size_t(i)] = a[i];
  }
  mine[4] = b[0];
  mine[5] = b[1];
  barrier();
  const int base = t & ~31;
  const int lane = t & 31;
  auto A = [&](int r, int k) {
    const auto& f = s.frags[std::size_t(base + (r % 8) * 4 + (k % 8) / 2)];
    return half_bits_to_float(f[std::size_t(r / 8 + 2 * (k / 8))] >> (16 * (k % 2)), dtype);
  };
  auto B = [&](int k, int n) {
    const auto& f = s.frags[std::size_t(base + n * 4 + (k % 8) / 2)];
    return half_bits_to_float(f[std::size_t(4 + k / 8)] >> (16 * (k % 2)), dtype);
  };
  float d[4];
  for (int e = 0; e < 4; ++e) {
    const int r = lane / 4 + 8 * (e / 2);
    const int n = 2 * (lane % 4) + e % 2;
    float acc = c[e];
    for (int k = 0; k < 16; ++k) {
      acc += A(r, k) * B(k, n);
    }
    d[e] = acc;
  }
  barrier(); // nobody overwrites a fragment before every lane has read
  for (int e = 0; e < 4; ++e) {
    c[e] = d[e];
  }
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: lane l gives the address of row l % 8 of
// matrix l / 8; register m of lane (g = lane / 4, t = lane % 4) receives matrix m's elements
// [2t][g] (bits 0..15) and [2t+1][g] (bits 16..31), i.e. row g of the transposed matrix.
inline void ldmatrix_x4_trans(uint32_t r[4], const void* row) {
  State& s = state();
  const int t = s.current;
  s.rows[std::size_t(t)] = row;
  barrier();
  const int base = t & ~31;
  const int lane = t & 31;
  for (int m = 0; m < 4; ++m) {
    uint32_t v = 0;
    for (int e = 0; e < 2; ++e) {
      const auto* src =
          static_cast<const uint16_t*>(s.rows[std::size_t(base + m * 8 + 2 * (lane % 4) + e)]);
      v |= uint32_t(src[lane / 4]) << (16 * e);
    }
    r[m] = v;
  }
  barrier(); // nobody replaces an address before every lane has read
}

// cvt.rn.{f16x2,bf16x2}.f32: lo in bits 0..15, hi in bits 16..31, round to nearest even.
inline uint32_t pack2(float lo, float hi, int dtype) {
  auto one = [&](float v) -> uint32_t {
    return dtype == 1 ? attn::float_to_half(v) : attn::float_to_bf16(v);
  };
  return one(lo) | (one(hi) << 16);
}

// cp.async of 16 bytes with zero fill; synchronous here, so waits are no-ops.
inline void cp_async16(void* dst, const void* src, bool valid) {
  if (valid) {
    std::memcpy(dst, src, 16);
  } else {
    std::memset(dst, 0, 16);
  }
}

} // namespace emu

struct uint2 {
  unsigned int x, y;
};
struct uint4 {
  unsigned int x, y, z, w;
};

#define ATTN_EMULATE_HOST 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::block_idx())
#define __syncthreads() ::emu::barrier()
#define __shfl_xor_sync(mask, v, off) ::emu::shfl_xor((v), (off))
#define __shfl_sync(mask, v, src) ::emu::shfl((v), (src))
#define __syncthreads_or(pred) ::emu::syncthreads_or(pred)
#define __syncwarp() ::emu::barrier()
#define __ldg(p) ::emu::ldg(p)
#define ATTN_KERNEL_LINKAGE
#define ATTN_UNROLL
#define ATTN_DYNAMIC_SHARED(type, name)                                                            \
  type* name = reinterpret_cast<type*>(::emu::state().dynamic_smem.data())

inline float __uint_as_float(unsigned int u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned int __float_as_uint(float f) {
  unsigned int u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float attn_emu_half_to_float(unsigned short h) { return attn::half_to_float(h); }
inline unsigned short attn_emu_float_to_half(float f) { return attn::float_to_half(f); }
inline void attn_emu_mma16816(float c[4], const unsigned int a[4], const unsigned int b[2],
                              int dtype) {
  ::emu::mma16816(c, a, b, dtype);
}
inline unsigned int attn_emu_pack2(float lo, float hi, int dtype) {
  return ::emu::pack2(lo, hi, dtype);
}
inline void attn_emu_ldmatrix_x4_trans(unsigned int r[4], const void* row) {
  ::emu::ldmatrix_x4_trans(r, row);
}
inline void attn_emu_cp_async16(void* dst, const void* src, bool valid) {
  ::emu::cp_async16(dst, src, valid);
}
