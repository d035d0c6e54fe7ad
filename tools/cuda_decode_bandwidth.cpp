// attn-cuda-bandwidth: decode v1 and v2 bandwidth (KV bytes read over time) against a
// device-to-device copy measured in the same run, every configuration validated first, over each
// cache dtype asked for (fp16 by default, then fp8 E4M3 and E5M2: their bytes are one per
// element, so a row's share of the copy says how close the kernel comes to reading the cache at
// the copy's speed, whatever it stores).
// Exit codes (tools/tool_exit.h): 0 all passed; 1 a configuration failed validation, after the
// whole table and JSON are out; 2 bad flags; 3 no usable GPU (one line on stderr); 4 an error.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "src/backends/cuda/copy_bandwidth.h"
#include "src/backends/cuda/cuda_backend.h"
#include "src/backends/cuda/precompile.h"
#include "src/model/errors.h"
#include "src/model/problem_gen.h"
#include "src/validation/checked_run.h"
#include "tools/tool_exit.h"

namespace {

using namespace attn;

struct Case {
  std::string name;
  int batch;
  int context;
};

struct Best {
  std::string key;
  double bytes_per_s = 0.0;
  double median_s = 0.0;
};

int run(int device, bool quick, const std::vector<std::string>& kv_names,
        const std::string& json_path) {
  // The cache dtypes first: a bad name is exit 2 with or without a GPU.
  std::vector<std::optional<DType>> caches;
  for (const std::string& name : kv_names) {
    const DType t = parse_kv_dtype(name, DType::f16);
    caches.push_back(is_fp8(t) ? std::optional<DType>(t) : std::nullopt);
  }
  auto be = make_cuda_backend(device);
  const DeviceInfo& d = be->info();
  std::printf("device %s: %s, %d SMs, L2 %.0f MiB\n", d.id.c_str(), d.name.c_str(), d.sm_count,
              double(d.l2_bytes) / (1 << 20));

  TimingOptions topt;
  topt.warmup = 2;
  topt.min_reps = 5;
  topt.max_reps = quick ? 30 : 200;
  topt.max_seconds = quick ? 0.1 : 0.5;
  const int64_t copy_bytes = int64_t(1) << 30;
  const cuda::CopyBandwidth copy = cuda::measure_copy_bandwidth(device, copy_bytes, topt);
  std::printf("device-to-device copy of %.0f MiB: %.1f GB/s (read + write)\n",
              double(copy_bytes) / (1 << 20), copy.bytes_per_s / 1e9);

  AttnParams p;
  p.num_heads = 32;
  p.num_kv_heads = 8;
  p.head_dim = 128;
  p.block_size = 16;
  p.dtype = DType::f16;
  // "long": few sequences, long contexts (v1 leaves SMs idle with split=1; v2 fills them);
  // "short": many sequences of 1k tokens (the reduce must not dominate).
  const std::vector<Case> cases = {{"long", 8, quick ? 16384 : 32768}, {"short", 64, 1024}};

  std::vector<cuda::DecodeVariant> variants;
  for (const auto& kv : caches) {
    p.kv_dtype = kv;
    for (Family f : {Family::decode_v1, Family::decode_v2}) {
      for (const auto& c : be->config_space(f, p)) {
        variants.push_back(cuda::decode_variant(c, p));
      }
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  (void)cuda::precompile_decode(variants, d.cc_major * 10 + d.cc_minor);
  std::printf("%zu kernel variants compiled or loaded from the cache in %.1f s\n", variants.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());

  nlohmann::json out = {{"device", d.to_json()},
                        {"copy_bytes_per_s", copy.bytes_per_s},
                        {"copy_timing", to_json(copy.timing)},
                        {"cases", nlohmann::json::array()}};
  std::vector<std::string> table;
  int failed = 0;
  for (const auto& kv : caches) {
    p.kv_dtype = kv;
    const std::string cache = std::string(dtype_name(p.cache_dtype()));
    for (const Case& cs : cases) {
      GenOptions g;
      g.seed = 20261129;
      g.pool_factor = 1.0; // timing only needs the bytes; the layout is still a permutation
      const Problem pr =
          make_decode_problem(p, std::vector<int>(std::size_t(cs.batch), cs.context), g);
      // The first and last sequences are checked: enough to catch a wrong kernel, cheap enough
      // for contexts of 32k.
      CheckSubject subject(cs.name, pr, {0, cs.batch - 1});
      RunRequest req;
      req.timing = topt;
      const double kv_bytes = double(pr.kv_bytes_touched());
      nlohmann::json jc = {{"case", cs.name},      {"kv_dtype", cache},
                           {"batch", cs.batch},    {"context", cs.context},
                           {"kv_bytes", kv_bytes}, {"results", nlohmann::json::array()}};
      for (Family f : {Family::decode_v1, Family::decode_v2}) {
        Best best;
        for (const auto& cfg : be->config_space(f, p)) {
          const CheckedRunResult r = checked_run_here(*be, subject, cfg, req);
          if (r.status == RunStatus::skipped) {
            jc["results"].push_back({{"config", cfg.key()}, {"skipped", r.reason}});
            continue;
          }
          if (r.status != RunStatus::passed) {
            const std::string what = r.check ? r.check->report.summary() : r.reason;
            std::printf("FAIL %s %s %s: %s\n%s", cs.name.c_str(), cache.c_str(), cfg.key().c_str(),
                        what.c_str(), r.check ? r.check->report.details().c_str() : "");
            jc["results"].push_back({{"config", cfg.key()}, {"check", what}});
            ++failed;
            continue;
          }
          const TimingResult& t = *r.timing;
          const CheckReport& rep = r.check->report;
          const double bw = kv_bytes / t.median_s;
          jc["results"].push_back({{"config", cfg.key()},
                                   {"bytes_per_s", bw},
                                   {"timing", to_json(t)},
                                   {"check", rep.summary()}});
          if (bw > best.bytes_per_s) {
            best = {cfg.key(), bw, t.median_s};
          }
        }
        char line[256];
        std::snprintf(line, sizeof line, "%-6s %-8s %-10s %9.1f %7.1f%%  %9.3f  %s",
                      cs.name.c_str(), cache.c_str(), family_name(f), best.bytes_per_s / 1e9,
                      100.0 * best.bytes_per_s / copy.bytes_per_s, best.median_s * 1e3,
                      best.key.c_str());
        std::printf("%s\n", line); // as it comes; the table below repeats it
        table.push_back(line);
      }
      out["cases"].push_back(jc);
    }
  }
  std::printf("\n%-6s %-8s %-10s %9s %8s  %9s  %s\n", "case", "cache", "family", "GB/s", "of copy",
              "ms", "best configuration");
  for (const auto& l : table) {
    std::printf("%s\n", l.c_str());
  }
  if (!json_path.empty()) {
    const std::string tmp = json_path + ".tmp";
    {
      std::ofstream f(tmp);
      f << out.dump(2) << "\n";
    }
    std::rename(tmp.c_str(), json_path.c_str());
  }
  return tools::validation_exit_code(failed);
}

} // namespace

int main(int argc, char** argv) {
  // Line by line, also into a file or pipe: a run stopped by a time limit keeps what it printed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{"Decode kernel bandwidth against a device-to-device copy"};
  int device = 0;
  bool quick = false;
  std::string json_path;
  std::vector<std::string> kv_names = {"auto", "fp8_e4m3", "fp8_e5m2"};
  app.add_option("--device", device, "CUDA device index")->check(CLI::NonNegativeNumber);
  app.add_flag("--quick", quick, "Shorter contexts and timing budgets");
  app.add_option("--kv-dtype", kv_names,
                 "KV cache dtypes to time, in order: auto (fp16, the queries' dtype), fp8_e4m3 "
                 "(fp8), fp8_e5m2")
      ->default_str("auto fp8_e4m3 fp8_e5m2");
  app.add_option("--json", json_path, "Also write every measurement to this JSON file");
  app.footer(tools::kSpeedToolExitCodes);
  if (const auto done = cli::parse_or_exit(app, argc, argv, "attn-cuda-bandwidth")) {
    return *done;
  }
  return cli::run_reporting_errors("attn-cuda-bandwidth",
                                   [&] { return run(device, quick, kv_names, json_path); });
}
