// attn-cuda-prefill-speed: TFLOP/s of the CUDA prefill kernel (visible query-key pairs only) on
// prompt shapes, every configuration validated on a small problem first; JSON for the comparison
// with PyTorch's scaled_dot_product_attention in scripts/prefill_vs_sdpa.py.
// Exit codes (tools/tool_exit.h): 0 all passed; 1 a configuration failed validation (it is left
// out of the timings, which still run, print and write); 2 bad flags; 3 no usable GPU (one line
// on stderr); 4 an error.
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "src/backends/cuda/cuda_backend.h"
#include "src/backends/cuda/precompile.h"
#include "src/backends/cuda/prefill_launch.h"
#include "src/model/errors.h"
#include "src/model/problem_gen.h"
#include "src/validation/checked_run.h"
#include "tools/tool_exit.h"

namespace {

using namespace attn;

struct Options {
  int device = 0;
  std::vector<int> seqs = {1024, 2048, 4096, 8192, 16384};
  std::vector<int> block_sizes = {16, 256};
  int tokens = 16384; // batch = tokens / seq, so every shape does a comparable amount of work
  int heads = 16;
  int head_dim = 128;
  double seconds = 0.1;
  std::string json_path;
};

AttnParams shape_params(const Options& o, int block_size, bool causal) {
  AttnParams p;
  p.num_heads = o.heads;
  p.num_kv_heads = o.heads; // dense MHA, as the SDPA side
  p.head_dim = o.head_dim;
  p.block_size = block_size;
  p.dtype = DType::bf16;
  p.causal = causal;
  return p;
}

int run(const Options& o) {
  auto be = make_cuda_backend(o.device);
  const DeviceInfo& d = be->info();
  std::printf("device %s: %s, %d SMs\n", d.id.c_str(), d.name.c_str(), d.sm_count);

  std::vector<cuda::PrefillVariant> variants;
  for (int bs : o.block_sizes) {
    const AttnParams p = shape_params(o, bs, true);
    for (const auto& c : be->config_space(Family::prefill, p)) {
      variants.push_back(cuda::prefill_variant(c, p));
    }
  }
  (void)cuda::precompile_prefill(variants, d.cc_major * 10 + d.cc_minor);

  TimingOptions topt;
  topt.warmup = 2;
  topt.min_reps = 3;
  topt.max_reps = 50;
  topt.max_seconds = o.seconds;
  topt.flush_cache = false; // compute-bound: the same conditions as the SDPA loop

  nlohmann::json out = {{"device", d.to_json()}, {"cases", nlohmann::json::array()}};
  // Which configurations compute correctly, per page size and mask: a small varlen problem
  // against the reference.
  std::map<std::pair<int, bool>, std::vector<KernelConfig>> good;
  std::map<std::pair<int, bool>, nlohmann::json> rejected;
  int failed = 0;
  for (int bs : o.block_sizes) {
    for (bool causal : {false, true}) {
      const AttnParams p = shape_params(o, bs, causal);
      GenOptions small_gen;
      small_gen.seed = 77;
      const Problem small = make_prefill_problem(p, {300, 129, 5}, {300, 200, 64}, small_gen);
      CheckSubject subject("small", small);
      auto& rej = rejected[{bs, causal}];
      rej = nlohmann::json::array();
      for (const auto& cfg : be->config_space(Family::prefill, p)) {
        const CheckedRunResult r = checked_run_here(*be, subject, cfg, RunRequest{});
        if (r.status == RunStatus::skipped) {
          rej.push_back({{"config", cfg.key()}, {"skipped", r.reason}});
          continue;
        }
        if (r.status != RunStatus::passed) {
          const std::string what = r.check ? r.check->report.summary() : r.reason;
          std::printf("FAIL %s bs=%d causal=%d: %s\n", cfg.key().c_str(), bs, int(causal),
                      what.c_str());
          rej.push_back({{"config", cfg.key()}, {"check", what}});
          ++failed;
          continue;
        }
        good[{bs, causal}].push_back(cfg);
      }
    }
  }

  std::printf("\n%6s %6s %5s %6s %9s %10s  %s\n", "seq", "batch", "bs", "causal", "TFLOP/s", "ms",
              "best configuration");
  for (int bs : o.block_sizes) {
    for (int seq : o.seqs) {
      // One problem per page size and length (generating 16k tokens of K/V takes a while); the
      // mask is a parameter of the launch.
      const int batch = std::max(1, o.tokens / seq);
      GenOptions g;
      g.seed = 20261129;
      g.pool_factor = 1.0;
      Problem pr = make_prefill_problem(shape_params(o, bs, false),
                                        std::vector<int>(std::size_t(batch), seq),
                                        std::vector<int>(std::size_t(batch), seq), g);
      for (bool causal : {false, true}) {
        pr.params.causal = causal;
        const double flops = 4.0 * pr.params.head_dim * double(pr.visible_pairs());
        nlohmann::json jc = {{"seq", seq},
                             {"batch", batch},
                             {"heads", pr.params.num_heads},
                             {"head_dim", pr.params.head_dim},
                             {"block_size", bs},
                             {"causal", causal},
                             {"visible_pairs", pr.visible_pairs()},
                             {"flops", flops},
                             {"rejected", rejected[{bs, causal}]},
                             {"results", nlohmann::json::array()}};
        double best_s = 0.0;
        std::string best_key;
        // Timed only: each configuration was checked on the small problem above.
        CheckSubject subject("prompt", pr);
        RunRequest req;
        req.check = false;
        req.timing = topt;
        for (const auto& cfg : good[{bs, causal}]) {
          const CheckedRunResult r = checked_run_here(*be, subject, cfg, req);
          if (r.status != RunStatus::passed || !r.timing) {
            throw std::runtime_error(cfg.key() + " could not be timed: " + r.reason);
          }
          const TimingResult& t = *r.timing;
          jc["results"].push_back({{"config", cfg.key()},
                                   {"median_s", t.median_s},
                                   {"tflops", flops / t.median_s / 1e12}});
          if (best_s == 0.0 || t.median_s < best_s) {
            best_s = t.median_s;
            best_key = cfg.key();
          }
        }
        jc["best_config"] = best_key;
        jc["best_s"] = best_s;
        jc["best_tflops"] = best_s > 0 ? flops / best_s / 1e12 : 0.0;
        std::printf("%6d %6d %5d %6d %9.1f %10.3f  %s\n", seq, batch, bs, int(causal),
                    best_s > 0 ? flops / best_s / 1e12 : 0.0, best_s * 1e3, best_key.c_str());
        std::fflush(stdout);
        out["cases"].push_back(jc);
      }
    }
  }
  if (!o.json_path.empty()) {
    const std::string tmp = o.json_path + ".tmp";
    {
      std::ofstream f(tmp);
      f << out.dump(2) << "\n";
    }
    std::rename(tmp.c_str(), o.json_path.c_str());
  }
  return tools::validation_exit_code(failed);
}

} // namespace

int main(int argc, char** argv) {
  // Line by line, also into a file or pipe: a run stopped by a time limit keeps what it printed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{"Prefill kernel TFLOP/s (visible query-key pairs) on prompt shapes"};
  Options o;
  app.add_option("--device", o.device, "CUDA device index")->check(CLI::NonNegativeNumber);
  app.add_option("--seqs", o.seqs, "Prompt lengths (query rows = keys)")->delimiter(',');
  app.add_option("--block-sizes", o.block_sizes, "KV page sizes")->delimiter(',');
  app.add_option("--tokens", o.tokens, "Tokens per shape (batch = tokens / seq)")
      ->check(CLI::PositiveNumber);
  app.add_option("--heads", o.heads, "Query (= KV) heads")->check(CLI::PositiveNumber);
  app.add_option("--head-dim", o.head_dim, "head_dim");
  app.add_option("--seconds", o.seconds, "Measured time per configuration and shape");
  app.add_option("--json", o.json_path, "Also write every measurement to this JSON file");
  app.footer(tools::kSpeedToolExitCodes);
  if (const auto done = cli::parse_or_exit(app, argc, argv, "attn-cuda-prefill-speed")) {
    return *done;
  }
  return cli::run_reporting_errors("attn-cuda-prefill-speed", [&] { return run(o); });
}
