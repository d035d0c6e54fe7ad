// The CPU kernels: cpu_kernels_body.inc, compiled once per instruction-set level (portable,
// x86-64-v3, x86-64-v4) in a namespace of its own, and the run-time choice among them. The
// levels differ in vector width and register blocking, not in what they compute; all softmax,
// mask and paged-address math comes from kernels/attn_math.h, apart from the vectorised e^x of
// the softmax weights (cpu_kernels_body.inc).
#include "src/backends/cpu/cpu_kernels.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <type_traits>
#if ATTN_CPU_MULTI_ISA
#include <immintrin.h>
#endif

#include "src/backends/cpu/simd.h"

namespace attn::cpu {

namespace am = attn_math;

namespace {
// Rows and vectors the buffers of a work item are sized for, whatever the level: query vectors
// are padded to 16 lanes and a key tile to a whole score block (at most 8 keys more).
constexpr int kMaxLanes = 16;
constexpr int kMaxKeyPad = 8;
} // namespace

void size_scratch(Scratch& s, int max_rows, int max_heads, int head_dim, int k_tile) {
  const std::size_t vectors = std::size_t(max_rows) * std::size_t(max_heads);
  const std::size_t lanes = (vectors + kMaxLanes - 1) / kMaxLanes * kMaxLanes;
  const std::size_t keys = std::size_t(k_tile) + kMaxKeyPad;
  s.q.resize(vectors * std::size_t(head_dim));
  s.acc.resize(vectors * std::size_t(head_dim));
  s.ld = (k_tile + 31) / 32 * 32;
  s.scores.resize(vectors * std::size_t(s.ld));
  s.qt.resize(std::size_t(head_dim) * lanes);
  s.st.resize(keys * lanes);
  s.lo_lane.resize(lanes);
  s.hi_lane.resize(lanes);
  s.m_lane.resize(lanes);
  s.l_lane.resize(lanes);
  s.alpha_lane.resize(lanes);
  s.kv.resize(std::size_t(k_tile) * std::size_t(head_dim));
  s.zero_row.assign(std::size_t(head_dim), 0.0f);
  s.rows.resize(keys);
  s.raw_rows.resize(keys);
  s.ahead.resize(2 * std::size_t(k_tile));
  s.sm.resize(vectors);
  s.lo.resize(std::size_t(max_rows));
  s.hi.resize(std::size_t(max_rows));
}

namespace k_base {
#define ATTN_KERNEL_LEVEL 0
#include "src/backends/cpu/cpu_kernels_body.inc"
#undef ATTN_KERNEL_LEVEL
} // namespace k_base

#if ATTN_CPU_MULTI_ISA
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v3")
namespace k_avx2 {
#define ATTN_KERNEL_LEVEL 1
#include "src/backends/cpu/cpu_kernels_body.inc"
#undef ATTN_KERNEL_LEVEL
} // namespace k_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("arch=x86-64-v4")
namespace k_avx512 {
#define ATTN_KERNEL_LEVEL 2
#include "src/backends/cpu/cpu_kernels_body.inc"
#undef ATTN_KERNEL_LEVEL
} // namespace k_avx512
#pragma GCC pop_options
#endif

// Each entry point calls the level's own; a level this build lacks falls back to the portable one
// (isa_supported() never offers it).
#if ATTN_CPU_MULTI_ISA
#define ATTN_BY_LEVEL(ISA, CALL)                                                                   \
  do {                                                                                             \
    if ((ISA) == Isa::avx512) {                                                                    \
      k_avx512::CALL;                                                                              \
    } else if ((ISA) == Isa::avx2) {                                                               \
      k_avx2::CALL;                                                                                \
    } else {                                                                                       \
      k_base::CALL;                                                                                \
    }                                                                                              \
  } while (0)
#else
#define ATTN_BY_LEVEL(ISA, CALL) k_base::CALL
#endif

void attend(Isa isa, const KernelArgs& a, const WorkItem& it, int k_tile, Scratch& s) {
  ATTN_BY_LEVEL(isa, attend(a, it, k_tile, s));
}

void combine_partials(Isa isa, const KernelArgs& a, int b, int head, float* tmp) {
  ATTN_BY_LEVEL(isa, combine(a, b, head, tmp));
}

void store_floats(Isa isa, DType t, const float* src, void* dst, std::size_t n) {
  ATTN_BY_LEVEL(isa, store(t, src, dst, n));
}

void convert_to_float(Isa isa, DType t, const void* src, float* dst, std::size_t n) {
  ATTN_BY_LEVEL(isa, convert(t, src, dst, n));
}

} // namespace attn::cpu
