// bench_cpu: how close the CPU backend gets to the machine, and to a peer. Decode is judged by K/V
// bytes read per second against a threaded memcpy of the same byte count timed in the same run;
// prefill by GFLOP/s (4 * visible query-key pairs * head_dim) against the measured FMA peak of
// the kernel build in use. The peer is the same calls through PyTorch on the CPU (attn_tune_torch
// over the Python bridge: what an engine's fallback path would run), timed the same way. Not part
// of ctest.
//   usage: bench_cpu [--threads N] [--quick] [--no-peer] [--warm] [--only decode|prefill]
//                    [--dtype fp32|fp16|bf16] [--kv-dtype fp8_e4m3|fp8_e5m2|none]
//                    [--decode-shape BATCHxCTX]
// Decode runs each dtype with its own cache, then fp16 queries (the --dtype given) over fp8_e4m3
// and fp8_e5m2 caches, one byte per element (--kv-dtype: one of them, or none).
// --only, --dtype and --decode-shape run a part of the table (to study one row without waiting
// for the rest). --warm times without the flush before each rep. It does not isolate the
// kernel's own work: the default decode shapes read 64 to 128 MiB of K/V, which do not stay in
// cache even unflushed, and shapes small enough to stay are timed mostly as per-call overhead.
// Nothing is validated here (the tests prove these kernels), so no exit code says "wrong":
// 0 the table is complete (goals met or not: the summary says); 2 bad flags; 4 a run that could
// not be timed, or another error (one line on stderr).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "src/backends/backend.h"
#include "src/backends/cpu/cpu_backend.h"
#include "src/backends/cpu/fma_peak.h"
#include "src/backends/cpu/isa.h"
#include "src/backends/cpu/thread_pool.h"
#include "src/backends/registry.h"
#include "src/cli/exit_codes.h"
#include "src/model/errors.h"
#include "src/model/problem_gen.h"
#include "src/validation/checked_run.h"

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

// One configuration timed (no check: a benchmark of kernels the tests already prove) through
// the checked run; a run that cannot be timed ends the benchmark with its reason.
TimingResult time_kernel(Backend& be, CheckSubject& subject, const KernelConfig& cfg,
                         const TimingOptions& opt) {
  RunRequest req;
  req.check = false;
  req.timing = opt;
  const CheckedRunResult r = checked_run_here(be, subject, cfg, req);
  if (r.status != RunStatus::passed || !r.timing) {
    throw std::runtime_error(cfg.key() + " could not be timed: " + r.reason);
  }
  return *r.timing;
}

AttnParams shape(DType dt) {
  AttnParams p;
  p.num_heads = 32;
  p.num_kv_heads = 8;
  p.head_dim = 128;
  p.block_size = 16;
  p.dtype = dt;
  return p;
}

int bench(int argc, char** argv) {
  int threads = 0;
  bool quick = false;
  bool peer_wanted = true;
  bool warm = false;
  std::string only;
  std::vector<DType> dtypes = {DType::f32, DType::f16, DType::bf16};
  std::vector<DType> kv_dtypes = {DType::fp8_e4m3, DType::fp8_e5m2};
  int shape_batch = 0, shape_ctx = 0;
  std::vector<std::string> only_configs; // --config: the decode configurations to time
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc && std::sscanf(argv[i + 1], "%d", &threads) == 1 &&
        threads >= 0) {
      ++i;
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--no-peer") {
      peer_wanted = false;
    } else if (a == "--warm") {
      warm = true;
    } else if (a == "--only" && i + 1 < argc &&
               (std::string(argv[i + 1]) == "decode" || std::string(argv[i + 1]) == "prefill")) {
      only = argv[++i];
    } else if (a == "--decode-shape" && i + 1 < argc &&
               std::sscanf(argv[i + 1], "%dx%d", &shape_batch, &shape_ctx) == 2 &&
               shape_batch > 0 && shape_ctx > 0) {
      ++i;
    } else if (a == "--config" && i + 1 < argc) {
      only_configs.emplace_back(argv[++i]);
    } else if (a == "--kv-dtype" && i + 1 < argc) {
      const std::string v = argv[++i];
      try {
        kv_dtypes = v == "none" ? std::vector<DType>{}
                                : std::vector<DType>{parse_kv_dtype(v, DType::f16)};
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_cpu: %s\n", e.what());
        return kExitUsage;
      }
      if (!kv_dtypes.empty() && !is_fp8(kv_dtypes.front())) {
        std::fprintf(stderr, "bench_cpu: --kv-dtype takes fp8_e4m3, fp8_e5m2 or none\n");
        return kExitUsage;
      }
    } else if (a == "--dtype" && i + 1 < argc) {
      try {
        dtypes = {parse_dtype(argv[++i])};
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_cpu: %s\n", e.what());
        return kExitUsage;
      }
    } else {
      std::fprintf(stderr, "usage: bench_cpu [--threads N] [--quick] [--no-peer] [--warm] "
                           "[--only decode|prefill] [--dtype fp32|fp16|bf16] "
                           "[--kv-dtype fp8_e4m3|fp8_e5m2|none] [--decode-shape BATCHxCTX] "
                           "[--config KEY]...\n");
      return kExitUsage;
    }
  }
  std::vector<KernelConfig> decode_configs = {
      KernelConfig{Family::decode_v1, {{"split", 0}}},
      KernelConfig{Family::decode_v1, {{"split", 1}}},
      KernelConfig{Family::decode_v2, {{"partition", 512}, {"split", 0}}},
      KernelConfig{Family::decode_v2, {{"partition", 512}, {"split", 1}}}};
  if (!only_configs.empty()) {
    std::vector<KernelConfig> picked;
    for (const std::string& key : only_configs) {
      const auto it = std::find_if(decode_configs.begin(), decode_configs.end(),
                                   [&](const KernelConfig& c) { return c.key() == key; });
      if (it == decode_configs.end()) {
        std::string known;
        for (const KernelConfig& c : decode_configs) {
          known += (known.empty() ? "" : ", ") + c.key();
        }
        std::fprintf(stderr, "bench_cpu: --config %s is not a decode configuration it times (%s)\n",
                     key.c_str(), known.c_str());
        return kExitUsage;
      }
      picked.push_back(*it);
    }
    decode_configs = picked;
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
  if (!kv_dtypes.empty() && isa == cpu::Isa::base) {
    std::printf("fp8 cache bytes moved into fp32s (the baseline build's only way)\n");
  } else if (!kv_dtypes.empty()) {
    const char* env = std::getenv(cpu::kFp8ReadsEnv);
    const bool forced = env != nullptr && *env != '\0' && std::string(env) != "auto";
    std::printf("E4M3 cache bytes read %s (%s); E5M2 through fp16 bits\n",
                cpu::fp8_reads_name(cpu::selected_fp8_reads()),
                forced ? "forced by ATTN_TUNE_CPU_FP8_READS" : "this processor's choice");
  }
  const double peak = cpu::measured_fma_peak_gflops(isa, info.threads, quick ? 0.2 : 0.5);
  std::printf("measured fp32 FMA peak of the %s build on %d threads: %.1f GFLOP/s\n",
              cpu::isa_name(isa), info.threads, peak);
  // The peer: PyTorch through the Python bridge, on as many threads. Absent (with the reason)
  // where the bridge, Python or torch is missing.
  std::unique_ptr<Backend> peer;
  if (peer_wanted) {
    try {
      peer = make_backend("cpu", {.threads = info.threads, .kernels = "python:attn_tune_torch"});
      std::printf(
          "peer: PyTorch %s through the Python bridge (python:attn_tune_torch), %d threads\n",
          peer->info().name.c_str(), info.threads);
    } catch (const std::exception& e) {
      std::printf("peer: none (%s)\n", e.what());
    }
  }
  TimingOptions topt;
  topt.warmup = 2;
  topt.min_reps = 5;
  topt.max_reps = 50;
  topt.max_seconds = quick ? 0.3 : 1.0;
  topt.flush_cache = !warm;
  if (warm) {
    std::printf("caches: warm (--warm): no flush before a rep\n");
  }
  // The peer is slower by orders of magnitude on some shapes; a few calls tell that.
  TimingOptions peer_opt = topt;
  peer_opt.warmup = 1;
  peer_opt.min_reps = 2;
  peer_opt.max_reps = 5;
  peer_opt.max_seconds = 1.0;
  const std::size_t flush_bytes = std::size_t(info.l2_bytes) * 2;
  auto peer_ms = [&](const Problem& pr, const KernelConfig& cfg) -> std::string {
    if (!peer) {
      return "-";
    }
    CheckSubject subject("peer", pr);
    RunRequest req;
    req.check = false;
    req.timing = peer_opt;
    const CheckedRunResult r = checked_run_here(*peer, subject, cfg, req);
    if (r.status != RunStatus::passed || !r.timing) {
      return "failed";
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", r.timing->median_s * 1e3);
    return buf;
  };

  // The issue-14 shapes: Llama-3-8B-like heads (h=32, kvh=8, d=128), 16-key blocks, contexts of
  // 2k to 8k at about the same K/V bytes per call.
  struct DecodeShape {
    int batch, ctx;
  };
  std::vector<DecodeShape> decode_shapes = {{16, 2048}, {8, 4096}, {4, 8192}};
  if (quick) {
    decode_shapes = {{8, 2048}, {2, 8192}};
  }
  if (shape_batch > 0) {
    decode_shapes = {{shape_batch, shape_ctx}};
  }
  std::printf(
      "\ndecode (h=32 kvh=8 d=128 bs=16, causal): K/V GB/s vs threaded memcpy of the "
      "same bytes; split=1 is one K/V pass per KV-head group, split=0 one per query head\n");
  std::printf("%-9s %-6s %-6s %-34s %9s %9s %9s %7s %12s\n", "dtype", "batch", "ctx", "config",
              "ms", "kernel", "memcpy", "ratio", "PyTorch ms");
  struct Best {
    std::string what;
    double ratio = 0.0;
  };
  std::vector<Best> decode_best;
  if (only == "prefill") {
    decode_shapes.clear();
  }
  // Each query dtype with its own cache, then fp16 queries over fp8 caches (kv_dtypes), whose
  // bytes count as one per element: the ratio to memcpy is of the bytes the kernel reads.
  std::vector<std::pair<DType, DType>> decode_dtypes;
  for (DType dt : dtypes) {
    decode_dtypes.emplace_back(dt, dt);
  }
  for (DType kv : kv_dtypes) {
    decode_dtypes.emplace_back(dtypes.size() == 1 ? dtypes.front() : DType::f16, kv);
  }
  for (const auto& [dt, kv] : decode_dtypes) {
    const std::string dname = kv == dt ? std::string(dtype_name(dt))
                                       : std::string(dtype_name(dt)) + "/" +
                                             std::string(dtype_name(kv)).substr(4);
    for (const auto& s : decode_shapes) {
      AttnParams p = shape(dt);
      if (kv != dt) {
        p.kv_dtype = kv;
      }
      const Problem pr = make_decode_problem(p, std::vector<int>(std::size_t(s.batch), s.ctx),
                                             {.seed = 1, .pool_factor = 1.0});
      const double bytes = double(pr.kv_bytes_touched());
      CopyBench copy(std::size_t(bytes), flush_bytes, copy_pool);
      auto copy_gbs = [&] {
        const TimingResult tc =
            measure([&] { return copy.once(); }, [&] { (void)copy.once(); }, topt, "steady_clock");
        return bytes / tc.median_s / 1e9;
      };
      Best best{dname + " ctx " + std::to_string(s.ctx), 0.0};
      double grouped = 0.0, per_head = 0.0;
      CheckSubject subject("decode", pr);
      for (const KernelConfig& cfg : decode_configs) {
        // The copy is timed right before and after the kernel, so that both see the same
        // machine (other processes, frequency) and the ratio stays meaningful.
        const double before = copy_gbs();
        const TimingResult t = time_kernel(*be, subject, cfg, topt);
        const double after = copy_gbs();
        const double copy_rate = 0.5 * (before + after);
        const double gbs = bytes / t.median_s / 1e9;
        const double ratio = gbs / copy_rate;
        best.ratio = std::max(best.ratio, ratio);
        const bool is_grouped = cfg.get("split", 1) == 1;
        double& by_kind = is_grouped ? grouped : per_head;
        by_kind = std::max(by_kind, ratio);
        // The peer has no split: it runs each family (and partition) once per shape.
        KernelConfig peer_cfg{cfg.family, {}};
        if (cfg.family == Family::decode_v2) {
          peer_cfg.params["partition"] = cfg.get("partition", 512);
        }
        // PyTorch's CPU attention has no fp8 cache to compare with.
        const std::string torch_ms = is_grouped && kv == dt ? peer_ms(pr, peer_cfg) : "";
        std::printf("%-9s %-6d %-6d %-34s %9.3f %9.2f %9.2f %7.2f %12s\n", dname.c_str(),
                    s.batch, s.ctx, cfg.key().c_str(),
                    t.median_s * 1e3, gbs, copy_rate, ratio, torch_ms.c_str());
        std::fflush(stdout);
      }
      best.what +=
          grouped >= per_head ? " (grouped >= per-head)" : " (grouped SLOWER than per-head)";
      decode_best.push_back(best);
    }
  }

  struct PrefillShape {
    int batch, q, k;
  };
  std::vector<PrefillShape> prefill_shapes = {{1, 1024, 1024}, {2, 512, 512}, {2, 256, 2048}};
  if (quick) {
    prefill_shapes = {{1, 1024, 1024}};
  }
  const std::vector<KernelConfig> prefill_configs = {
      KernelConfig{Family::prefill, {{"q_tile", 16}, {"k_tile", 64}, {"split", 1}}},
      KernelConfig{Family::prefill, {{"q_tile", 32}, {"k_tile", 64}, {"split", 1}}},
      KernelConfig{Family::prefill, {{"q_tile", 32}, {"k_tile", 128}, {"split", 0}}},
      KernelConfig{Family::prefill, {{"q_tile", 64}, {"k_tile", 128}, {"split", 1}}}};
  std::printf("\nprefill (h=32 kvh=8 d=128 bs=16, causal): GFLOP/s = 4 * visible pairs * d / t\n");
  std::printf("%-6s %-6s %-6s %-6s %-40s %9s %9s %7s %12s\n", "dtype", "batch", "q", "k", "config",
              "ms", "GFLOP/s", "of peak", "PyTorch ms");
  std::vector<Best> prefill_best;
  if (only == "decode") {
    prefill_shapes.clear();
  }
  for (DType dt : dtypes) {
    for (const auto& s : prefill_shapes) {
      const Problem pr = make_prefill_problem(
          shape(dt), std::vector<int>(std::size_t(s.batch), s.q),
          std::vector<int>(std::size_t(s.batch), s.k), {.seed = 2, .pool_factor = 1.0});
      const double flops = 4.0 * double(pr.visible_pairs()) * pr.params.head_dim;
      Best best{std::string(dtype_name(dt)) + " " + std::to_string(s.q) + "x" + std::to_string(s.k),
                0.0};
      // A peak is a maximum, which a busy neighbour only lowers: it is measured again right
      // before and after this shape's rows, and the highest of the three is what they are read
      // against (the rows are printed once it is known).
      const double before = cpu::measured_fma_peak_gflops(isa, info.threads, 0.2);
      struct Row {
        std::string head; // the columns before "of peak"
        double gflops;
        std::string torch_ms;
      };
      std::vector<Row> rows;
      bool first = true;
      CheckSubject subject("prefill", pr);
      for (const KernelConfig& cfg : prefill_configs) {
        const TimingResult t = time_kernel(*be, subject, cfg, topt);
        const double gflops = flops / t.median_s / 1e9;
        const std::string torch_ms = first ? peer_ms(pr, KernelConfig{Family::prefill, {}}) : "";
        first = false;
        char line[200];
        std::snprintf(line, sizeof line, "%-6s %-6d %-6d %-6d %-40s %9.3f %9.2f",
                      std::string(dtype_name(dt)).c_str(), s.batch, s.q, s.k, cfg.key().c_str(),
                      t.median_s * 1e3, gflops);
        rows.push_back({line, gflops, torch_ms});
      }
      const double after = cpu::measured_fma_peak_gflops(isa, info.threads, 0.2);
      const double shape_peak = std::max({peak, before, after});
      for (const Row& r : rows) {
        std::printf("%s %7.2f %12s\n", r.head.c_str(), r.gflops / shape_peak, r.torch_ms.c_str());
        best.ratio = std::max(best.ratio, r.gflops / shape_peak);
      }
      std::printf("  (FMA peak for these rows: %.1f GFLOP/s; %.1f before them, %.1f after)\n",
                  shape_peak, before, after);
      std::fflush(stdout);
      prefill_best.push_back(best);
    }
  }

  // The issue-14 goals, read off the rows above: decode's best configuration >= 0.70 of memcpy
  // and prefill >= 0.40 of the FMA peak, at this build.
  std::printf("\nsummary (%s build): best decode configuration, of memcpy (goal >= 0.70)\n",
              cpu::isa_name(isa));
  for (const Best& b : decode_best) {
    std::printf("  %-50s %5.2f  %s\n", b.what.c_str(), b.ratio, b.ratio >= 0.70 ? "met" : "MISSED");
  }
  std::printf("best prefill configuration, of FMA peak (goal >= 0.40 at 1024x1024)\n");
  for (const Best& b : prefill_best) {
    std::printf("  %-50s %5.2f  %s\n", b.what.c_str(), b.ratio, b.ratio >= 0.40 ? "met" : "below");
  }
  return kExitOk;
}

} // namespace

int main(int argc, char** argv) {
  return cli::run_reporting_errors("bench_cpu", [&] { return bench(argc, argv); });
}
