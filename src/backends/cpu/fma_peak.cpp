#include "src/backends/cpu/fma_peak.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "src/model/errors.h"

namespace attn::cpu {

namespace {

// Each loop keeps more independent accumulator chains than (FMA units x latency), so that
// throughput, not latency, bounds it, and no more than the registers hold: 16 of AVX-512's 32
// zmm, 12 of AVX2's 16 ymm (two more hold the operands). Returns the flops it did.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("arch=x86-64-v4"))) double fma_loop_avx512(long iters, float seed) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) {
    acc[i] = _mm512_set1_ps(seed + float(i));
  }
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < iters; ++it) {
    for (int i = 0; i < 16; ++i) {
      acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    }
  }
  __m512 sum = acc[0];
  for (int i = 1; i < 16; ++i) {
    sum = _mm512_add_ps(sum, acc[i]);
  }
  // Stored rather than _mm512_reduce_add_ps, which GCC 12 reports as reading uninitialised lanes.
  alignas(64) float out[16];
  _mm512_store_ps(out, sum);
  volatile float sink = out[0] + out[15];
  (void)sink;
  return double(iters) * 16 * 16 * 2;
}

__attribute__((target("arch=x86-64-v3"))) double fma_loop_avx2(long iters, float seed) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) {
    acc[i] = _mm256_set1_ps(seed + float(i));
  }
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < iters; ++it) {
    for (int i = 0; i < 12; ++i) {
      acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    }
  }
  __m256 sum = acc[0];
  for (int i = 1; i < 12; ++i) {
    sum = _mm256_add_ps(sum, acc[i]);
  }
  alignas(32) float out[8];
  _mm256_store_ps(out, sum);
  volatile float sink = out[0];
  (void)sink;
  return double(iters) * 12 * 8 * 2;
}

double fma_loop_base(long iters, float seed) {
  __m128 acc[12];
  for (int i = 0; i < 12; ++i) {
    acc[i] = _mm_set1_ps(seed + float(i));
  }
  const __m128 a = _mm_set1_ps(0.999999f), b = _mm_set1_ps(1e-7f);
  for (long it = 0; it < iters; ++it) {
    for (int i = 0; i < 12; ++i) {
      acc[i] = _mm_add_ps(_mm_mul_ps(acc[i], a), b);
    }
  }
  __m128 sum = acc[0];
  for (int i = 1; i < 12; ++i) {
    sum = _mm_add_ps(sum, acc[i]);
  }
  volatile float sink = _mm_cvtss_f32(sum);
  (void)sink;
  return double(iters) * 12 * 4 * 2;
}
#else
double fma_loop_base(long iters, float seed) {
  float acc[8];
  for (int i = 0; i < 8; ++i) {
    acc[i] = seed + float(i);
  }
  for (long it = 0; it < iters; ++it) {
    for (int i = 0; i < 8; ++i) {
      acc[i] = acc[i] * 0.999999f + 1e-7f;
    }
  }
  volatile float sink = acc[0] + acc[7];
  (void)sink;
  return double(iters) * 8 * 2;
}
#endif

double run_loop(Isa isa, long iters, float seed) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == Isa::avx512) {
    return fma_loop_avx512(iters, seed);
  }
  if (isa == Isa::avx2) {
    return fma_loop_avx2(iters, seed);
  }
#endif
  return fma_loop_base(iters, seed);
}

} // namespace

double measured_fma_peak_gflops(Isa isa, int threads, double seconds) {
  if (!isa_supported(isa)) {
    throw InputError(std::string("this processor cannot run the ") + isa_name(isa) + " kernels");
  }
  threads = std::max(1, threads);
  // Calibrate one thread's iteration count to the time asked for.
  using Clock = std::chrono::steady_clock;
  long iters = 1 << 16;
  for (;;) {
    const auto t0 = Clock::now();
    (void)run_loop(isa, iters, 1.0f);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (dt > seconds / 4 || iters > (1L << 40)) {
      iters = long(double(iters) * seconds / std::max(dt, 1e-9));
      break;
    }
    iters *= 4;
  }
  std::vector<double> flops(std::size_t(threads), 0.0);
  std::atomic<int> ready{0};
  std::vector<std::thread> pool;
  const auto t0 = Clock::now();
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < threads) {
      }
      flops[std::size_t(t)] = run_loop(isa, iters, float(t));
    });
  }
  for (auto& th : pool) {
    th.join();
  }
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  double total = 0.0;
  for (double f : flops) {
    total += f;
  }
  return total / dt / 1e9;
}

} // namespace attn::cpu
