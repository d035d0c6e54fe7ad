// Private to src/report: the shape words and table readers the model's files share, and the
// functions that fill each view of a ReportModel (build_report_model calls them in page order).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "include/attn_tune/threshold_table_reader.hpp"
#include "src/model/workload.h"
#include "src/report/report_model.h"
#include "src/tuning/decode_point.h"
#include "src/tuning/regret.h"

namespace attn::report {

// The mask and shape fields a table point, a held-out point and a workload share.
struct Shape {
  std::string dtype;
  std::string kv_dtype; // the KV cache's dtype where it is fp8, else ""
  int head_dim = 0;
  int block_size = 0;
  int num_kv_heads = 1;
  int gqa = 1;
  int num_heads = 1;
  int batch = 1;
  bool causal = true;
  int window_left = -1;
  int window_right = -1;
  double softcap = 0.0;
};

// A table's decode, prefill or held-out point; a measured workload.
[[nodiscard]] Shape shape_of(const nlohmann::json& p);
[[nodiscard]] Shape shape_of(const Workload& w);
// " · non-causal · window 128/0 · softcap 30", or empty for a plain causal mask.
[[nodiscard]] std::string mask_words(const Shape& s);
// What a decision map is drawn for: everything but the batch and the context length.
[[nodiscard]] std::string map_key(const Shape& s);
[[nodiscard]] std::string map_title(const Shape& s); // "fp16 · head_dim 128 · block 16 · ..."
[[nodiscard]] std::string decode_point_key(const Shape& s); // map_key and the batch
// One decode call in words: "b=4 ctx=4096 kvh=8 gqa=4 d=128 bs=16 fp16".
[[nodiscard]] std::string point_words(const Shape& s, int context_len);
// The call as an engine asks the table (ThresholdTableReader::lookup).
[[nodiscard]] attn_tune::Query query_of(const Shape& s, int context_len);

// Readers of a table's measured entries.
[[nodiscard]] Timed timed_of(const nlohmann::json& t);
[[nodiscard]] bool has_time(const nlohmann::json& entry, const char* slot); // "v1", "v2"
// The table's v2 intervals of a point, [from, to) with to 0 for no end, in either version.
[[nodiscard]] std::vector<std::pair<int, int>> v2_intervals(const nlohmann::json& p);
// A configuration's partition, kKernelSplits without one (a decode_v2 whose kernel chooses its
// splits, and decode_v1).
[[nodiscard]] int partition_of(const nlohmann::json& config);
// The table's fitted rule (its `rule`), or an empty Rule where the table has none.
[[nodiscard]] Rule fitted_rule_of(const nlohmann::json& table);

// Provenance and measurement counts (model_provenance.cpp).
void add_provenance(ReportModel& m, const ReportSource& src);
void add_issues(ReportModel& m, const ReportSource& src);

// The measured time of every v2 partition at each context of each decode point, from results:
// decode_point_key -> partition -> context length -> seconds.
using PartitionTimes = std::map<std::string, std::map<int, std::map<int, double>>>;
// Latency over context length (model_latency.cpp).
void add_latency(ReportModel& m, const ReportSource& src, const PartitionTimes& parts);

// Decision maps and the rules' switches (model_decision_map.cpp).
void add_maps(ReportModel& m, const ReportSource& src);

// One decode point with what the regret needs: the point, its shape and its set.
struct RegretInput {
  DecodePoint pt;
  Shape shape;
  bool held_out = false;
};
// Regret of each rule point by point (model_regret.cpp), from results.jsonl when there is one
// (decode_workload_points), else from the table's best v1 and v2 per point.
void add_regret(ReportModel& m, const ReportSource& src, const std::vector<RegretInput>& in);
[[nodiscard]] std::vector<RegretInput> regret_inputs_from_table(const nlohmann::json& table);

// Prefill rates (model_prefill.cpp).
void add_prefill(ReportModel& m, const ReportSource& src);
// The traffic view of a version 4 table with batches (model_traffic.cpp); after add_provenance.
void add_traffic(ReportModel& m, const ReportSource& src);

} // namespace attn::report
