// bench_cpu: how close the CPU backend gets to the machine. Decode is judged by K/V bytes read
// per second against a threaded memcpy of the same byte count timed in the same run; prefill by
// GFLOP/s (4 * visible query-key pairs * head_dim). Not part of ctest.
//   usage: bench_cpu [--threads N] [--quick]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "src/backends/backend.h"
#include "src/backends/cpu/cpu_backend.h"
#include "src/backends/cpu/fma_peak.h"
#include "src/backends/cpu/isa.h"
#include "src/backends/cpu/thread_pool.h"

using namespace attn;

namespace {

// Seconds of one threaded memcpy of `bytes`, after the same cache flush the kernels get.
struct CopyBench {
  std::vector<unsigned char> src, dst, flush;
  ThreadPool& pool;
  CopyBench(std::size_t bytes, std::size_t flush_bytes, ThreadPool& p)
      : src(bytes, 1), dst(bytes, 0), flush(flush_bytes, 0), pool(p) {}
  double once() {
    for (std::size_t i = 0; i < flush.size(); i += 64) {
      flush[i] = static_cast<unsigned char>(flush[i] + 1);
    }
    const std::size_t chunk = 1 << 20;
    const int n = int((src.size() + chunk - 1) / chunk);
    const auto t0 = std::chrono::steady_clock::now();
    pool.run(n, [&](int task, int) {
      const std::size_t off = std::size_t(task) * chunk;
      std::memcpy(dst.data() + off, src.data() + off, std::min(chunk, src.size() - off));
    });
    const auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double>(t1 - t0).count();
  }
};

AttnParams shape(DType dt) {
  AttnParams p;
  p.num_heads = 32;
  p.num_kv_heads = 8;
  p.head_dim = 128;
  p.block_size = 16;
  p.dtype = dt;
  return p;
}

} // namespace

int main(int argc, char** argv) {
  int threads = 0;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::stoi(argv[++i]);
    } else if (a == "--quick") {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: bench_cpu [--threads N] [--quick]\n");
      return 2;
    }
  }
  auto be = make_cpu_backend({.threads = threads, .kernels = ""});
  const DeviceInfo& info = be->info();
  ThreadPool copy_pool(info.threads);
  // Which build runs (ATTN_TUNE_CPU_ISA forces a lower one) and what the machine could run, so
  // that figures from different machines and levels are compared honestly.
  const cpu::Isa isa = cpu::selected_isa();
  std::printf("device: %s, %d threads, LLC %.0f MiB\n", info.name.c_str(), info.threads,
              double(info.l2_bytes) / (1 << 20));
  std::printf("kernels: %s build (%s); this machine's best: %s; AVX-512: %s\n", cpu::isa_name(isa),
              isa != cpu::best_isa() ? "forced by ATTN_TUNE_CPU_ISA" : "the best this machine runs",
              cpu::isa_name(cpu::best_isa()), cpu::isa_supported(cpu::Isa::avx512) ? "yes" : "no");
  const double peak = cpu::measured_fma_peak_gflops(isa, info.threads, quick ? 0.2 : 0.5);
  std::printf("measured fp32 FMA peak of the %s build on %d threads: %.1f GFLOP/s\n",
              cpu::isa_name(isa), info.threads, peak);
  TimingOptions topt;
  topt.warmup = 2;
  topt.min_reps = 5;
  topt.max_reps = 50;
  topt.max_seconds = quick ? 0.3 : 1.0;
  topt.flush_cache = true;
  const std::size_t flush_bytes = std::size_t(info.l2_bytes) * 2;

  struct DecodeShape {
    int batch, ctx;
  };
  std::vector<DecodeShape> decode_shapes = {{16, 2048}, {32, 4096}, {16, 8192}};
  if (quick) {
    decode_shapes = {{16, 2048}};
  }
  std::printf("\ndecode (h=32 kvh=8 d=128 bs=16, causal): K/V GB/s vs threaded memcpy of the "
              "same bytes\n");
  std::printf("%-6s %-6s %-6s %-30s %10s %10s %10s %7s\n", "dtype", "batch", "ctx", "config", "ms",
              "kernel", "memcpy", "ratio");
  for (DType dt : {DType::f16, DType::f32}) {
    for (const auto& s : decode_shapes) {
      const Problem pr =
          make_decode_problem(shape(dt), std::vector<int>(std::size_t(s.batch), s.ctx),
                              {.seed = 1, .pool_factor = 1.0});
      const double bytes = double(pr.kv_bytes_touched());
      CopyBench copy(std::size_t(bytes), flush_bytes, copy_pool);
      auto copy_gbs = [&] {
        const TimingResult tc =
            measure([&] { return copy.once(); }, [&] { (void)copy.once(); }, topt, "steady_clock");
        return bytes / tc.median_s / 1e9;
      };
      for (const KernelConfig& cfg :
           {KernelConfig{Family::decode_v1, {{"split", 0}}},
            KernelConfig{Family::decode_v1, {{"split", 1}}},
            KernelConfig{Family::decode_v2, {{"partition", 512}, {"split", 0}}},
            KernelConfig{Family::decode_v2, {{"partition", 512}, {"split", 1}}}}) {
        auto run = be->prepare(pr, cfg);
        // The copy is timed right before and after the kernel, so that both see the same
        // machine (other processes, frequency) and the ratio stays meaningful.
        const double before = copy_gbs();
        const TimingResult t = run->time(topt);
        const double after = copy_gbs();
        const double copy = 0.5 * (before + after);
        const double gbs = bytes / t.median_s / 1e9;
        std::printf("%-6s %-6d %-6d %-30s %10.3f %10.2f %10.2f %7.2f\n",
                    std::string(dtype_name(dt)).c_str(), s.batch, s.ctx, cfg.key().c_str(),
                    t.median_s * 1e3, gbs, copy, gbs / copy);
        std::fflush(stdout);
      }
    }
  }

  struct PrefillShape {
    int batch, q, k;
  };
  std::vector<PrefillShape> prefill_shapes = {{2, 512, 512}, {2, 256, 2048}};
  if (quick) {
    prefill_shapes = {{1, 256, 256}};
  }
  std::printf("\nprefill (h=32 kvh=8 d=128 bs=16, causal): GFLOP/s = 4 * visible pairs * d / t\n");
  std::printf("%-6s %-6s %-6s %-6s %-38s %10s %10s %7s\n", "dtype", "batch", "q", "k", "config",
              "ms", "GFLOP/s", "of peak");
  for (DType dt : {DType::f16, DType::f32}) {
    for (const auto& s : prefill_shapes) {
      const Problem pr = make_prefill_problem(
          shape(dt), std::vector<int>(std::size_t(s.batch), s.q),
          std::vector<int>(std::size_t(s.batch), s.k), {.seed = 2, .pool_factor = 1.0});
      const double flops = 4.0 * double(pr.visible_pairs()) * pr.params.head_dim;
      for (const KernelConfig& cfg :
           {KernelConfig{Family::prefill, {{"q_tile", 16}, {"k_tile", 64}, {"split", 1}}},
            KernelConfig{Family::prefill, {{"q_tile", 32}, {"k_tile", 64}, {"split", 1}}},
            KernelConfig{Family::prefill, {{"q_tile", 32}, {"k_tile", 128}, {"split", 0}}}}) {
        auto run = be->prepare(pr, cfg);
        const TimingResult t = run->time(topt);
        const double gflops = flops / t.median_s / 1e9;
        std::printf("%-6s %-6d %-6d %-6d %-38s %10.3f %10.2f %7.2f\n",
                    std::string(dtype_name(dt)).c_str(), s.batch, s.q, s.k, cfg.key().c_str(),
                    t.median_s * 1e3, gflops, gflops / peak);
      }
    }
  }
  return 0;
}
