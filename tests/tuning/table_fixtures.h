// Synthetic sweep records with known answers, shared by the tests of the threshold table, its
// schema check and its `table show` text.
#pragma once
#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/model/kernel_config.h"
#include "src/tuning/results_file.h"

namespace attn::fixtures {

// A provenance that passes the schema check: a plugin whose kernels replace vLLM CPU's rule.
inline nlohmann::json provenance() {
  return {{"device", {{"name", "synthetic"}}},
          {"tool", {{"version", "v"}, {"git_hash", "g"}}},
          {"kernels",
           {{"source", "plugin"},
            {"name", "synthetic"},
            {"version", "1.0"},
            {"abi_version", 3},
            {"library_sha256", "ab"},
            {"engine_rule", "vllm-cpu"}}},
          {"kernel_sources_sha256", "ab"},
          {"profile", {{"name", "p"}, {"hash", "h"}}},
          {"created_utc", "2026-01-01T00:00:00Z"},
          {"timing_method", "synthetic"}};
}

// One decode measurement of a fp16, d=128, bs=16, gqa 4 workload.
inline MeasurementRecord rec(int batch, int ctx, int kvh, const KernelConfig& c, double s,
                             bool held_out = false, const char* status = "ok") {
  MeasurementRecord r;
  r.workload.phase = Phase::decode;
  r.workload.batch = batch;
  r.workload.context_len = ctx;
  r.workload.held_out = held_out;
  r.workload.params.num_kv_heads = kvh;
  r.workload.params.num_heads = kvh * 4;
  r.workload.params.head_dim = 128;
  r.workload.params.block_size = 16;
  r.workload.params.dtype = DType::f16;
  r.config = c;
  r.status = status;
  r.median_s = s;
  r.method = "synthetic";
  return r;
}

// The same with a recorded spread: the interquartile range `iqr` centred on the median.
inline MeasurementRecord spread_rec(int batch, int ctx, int kvh, const KernelConfig& c, double s,
                                    double iqr) {
  MeasurementRecord r = rec(batch, ctx, kvh, c, s);
  r.p25_s = s - iqr / 2;
  r.p75_s = s + iqr / 2;
  return r;
}

// Two shape points, one failed measurement and one held-out point:
//   batch 1, kvh 8: v2 wins from 2048 (partition 256 at 2048, 512 at 8192);
//   batch 64, kvh 8: v1 at every context; its v2 partition 256 at 8192 failed validation;
//   batch 2, kvh 8, ctx 4096, held out: v2 wins.
inline std::vector<MeasurementRecord> two_points_and_held_out() {
  const KernelConfig v1{Family::decode_v1, {}};
  const KernelConfig v2a{Family::decode_v2, {{"partition", 256}}};
  const KernelConfig v2b{Family::decode_v2, {{"partition", 512}}};
  struct Times {
    int ctx;
    double v1, v2a, v2b;
  };
  std::vector<MeasurementRecord> rs;
  for (auto [ctx, t1, ta, tb] :
       std::vector<Times>{{512, 1.0, 1.5, 1.6}, {2048, 4.0, 2.0, 3.0}, {8192, 16.0, 6.0, 5.0}}) {
    rs.push_back(rec(1, ctx, 8, v1, t1));
    rs.push_back(rec(1, ctx, 8, v2a, ta));
    rs.push_back(rec(1, ctx, 8, v2b, tb));
  }
  for (int ctx : {512, 2048, 8192}) {
    rs.push_back(rec(64, ctx, 8, v1, ctx * 1e-3));
    rs.push_back(rec(64, ctx, 8, v2b, ctx * 2e-3));
  }
  rs.push_back(rec(64, 8192, 8, v2a, 0, false, "failed"));
  rs.push_back(rec(2, 4096, 8, v1, 3.0, true));
  rs.push_back(rec(2, 4096, 8, v2b, 1.5, true));
  return rs;
}

// Synthetic timings with a known answer: v1 costs the batch's longest length (one pass per
// sequence, the longest finishes last), v2 costs a fixed overhead plus the total length spread
// over 8 workers. So v2 wins where one long sequence sits among short ones, v1 where lengths
// are even.
inline std::vector<MeasurementRecord> mixed_batches() {
  const KernelConfig v1{Family::decode_v1, {}};
  const KernelConfig v2{Family::decode_v2, {{"partition", 256}}};
  const std::vector<std::vector<int>> batches = {
      {4000, 40, 50, 60, 30, 20, 45, 35}, {3000, 30, 30, 30, 30, 30, 30, 30},
      {500, 520, 480, 510, 490, 505, 495, 500}, {800, 790, 810, 805, 795, 800, 800, 800},
      {6000, 10, 20, 30, 40, 50, 60, 70},  {300, 300, 300, 300, 300, 300, 300, 300},
      {5000, 100, 90, 80, 70, 60, 50, 40}, {700, 700, 690, 710, 700, 700, 700, 700},
      {4500, 25, 25, 25, 25, 25, 25, 25},  {600, 610, 590, 600, 600, 600, 600, 600}};
  std::vector<MeasurementRecord> rs;
  for (std::size_t i = 0; i < batches.size(); ++i) {
    const auto& lens = batches[i];
    const double mx = *std::max_element(lens.begin(), lens.end());
    const double sum = std::accumulate(lens.begin(), lens.end(), 0.0);
    for (const auto& [cfg, t] : {std::pair{v1, mx * 1e-6}, std::pair{v2, 2e-4 + sum / 8 * 1e-6}}) {
      MeasurementRecord r = rec(8, 1, 8, cfg, t);
      r.workload.set_decode_lens(lens);
      r.workload.held_out = i >= 8; // the last two are held out
      r.workload.weight = i == 0 ? 5.0 : 1.0;
      rs.push_back(r);
    }
  }
  // Grid points of the same shape (batch 8, equal lengths): v1 wins at every length here.
  for (int ctx : {256, 1024}) {
    rs.push_back(rec(8, ctx, 8, v1, ctx * 1e-6));
    rs.push_back(rec(8, ctx, 8, v2, 2e-4 + ctx * 1e-6));
  }
  return rs;
}

} // namespace attn::fixtures
