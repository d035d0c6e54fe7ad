// What `attn-tune report` shows, as numbers: a sweep's table (and its results.jsonl when there is
// one) turned into the views of the page, each with the data table the page and the CSVs hold.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/tuning/regret.h"
#include "src/tuning/results_file.h"

namespace attn::report {

// The numbers behind one view: shown under its figure and written as `<id>.csv`.
struct DataTable {
  std::string id; // "decision_map"
  std::string title;
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
};

// A sweep folder or a lone table, read and checked.
struct ReportSource {
  std::string given;        // the path as the user gave it
  std::string table_path;   // threshold_table.json
  std::string results_path; // results.jsonl; empty when there is none
  nlohmann::json table;
  std::vector<MeasurementRecord> records; // one per (workload, configuration), from the results
  std::vector<nlohmann::json> lines;      // the results' measurement lines, for failure reasons
};
// Reads DIR/threshold_table.json (and DIR/results.jsonl when present) or a table file. Throws
// InputError with one line naming the path and the problem: missing, unreadable, not JSON, not
// a threshold table, or a results file that is corrupt or belongs to another device or profile.
[[nodiscard]] ReportSource load_report_source(const std::string& dir_or_table);

// One measured time with its interquartile range (p25 == p75 == median when none was recorded).
struct Timed {
  double median_s = 0.0;
  double p25_s = 0.0;
  double p75_s = 0.0;
  bool has_spread = false;
};

// One line of a latency chart over context length.
struct LatencySeries {
  std::string name; // "best v1", "best v2", "v2 partition 512", "v2, the kernel chooses its splits"
  std::string kind; // "v1", "v2" or "partition"
  int partition = 0;
  std::map<int, Timed> by_context;
};

// The latency over context length of one decode point (a shape and a batch).
struct LatencyChart {
  std::string shape_key; // shared with the decision map of its shape
  std::string title;     // "batch 4 · fp16 · head_dim 128 · ..."
  int batch = 1;
  std::vector<LatencySeries> series;   // best v1, best v2, then each partition
  std::vector<std::pair<int, int>> v2; // the table's v2 intervals [from, to); to 0: open
  std::vector<int> within_noise;       // context lengths where v1 and v2 are within noise
};

// One cell of a decision map: the measured winner at (batch, context length).
struct DecisionCell {
  bool v2 = false;
  int partition = 0;   // the winning v2 partition (kKernelSplits: the kernel chooses its splits)
  std::string config;  // the winning configuration's key
  double margin = 0.0; // slower family / faster family - 1
  bool within_noise = false;
  bool both = false;           // both families were measured
  bool noisy_decision = false; // the table's decision here rests on timings within noise
};

// A decision of the table that rests on timings within noise (its decode[].noisy_decisions).
struct NoisyMark {
  std::string shape_key; // the decision map it belongs to
  int batch = 1;
  int context_len = 0;
  std::string where;    // point_words: "b=4 ctx=2048 kvh=8 gqa=4 d=128 bs=16 fp16"
  std::string decision; // "v1" or "v2", what the table chose
  std::string faster;   // whose median was lower
  double margin = 0.0;
  double noise = 0.0;
  int carried_from = 0; // 0: none (no length beyond noise)
  int switch_at = 0;    // 0: borders no switch
  bool remeasured = false;
};

// Where a rule switches between v1 and v2 along context length in one batch row.
struct RuleSwitch {
  int context_len = 0; // the first context length with the new decision
  bool to_v2 = true;
};

// The decision map of one shape: batch x context length, plus the switch lines of the rules.
struct DecisionMap {
  std::string shape_key;
  std::string title;
  int num_heads = 1;
  int num_kv_heads = 1;
  std::vector<int> batches;                          // rows, ascending
  std::vector<int> contexts;                         // columns, ascending
  std::map<std::pair<int, int>, DecisionCell> cells; // (batch, context)
  int ctx_lo = 1;                                    // the context range the x axis spans
  int ctx_hi = 1;
  // rule id (the rules that pick a family) -> per batch row, its switches within [ctx_lo, ctx_hi]
  std::map<std::string, std::map<int, std::vector<RuleSwitch>>> switches;
  // rule id -> whether it chooses v2 at each cell (batch, context)
  std::map<std::string, std::map<std::pair<int, int>, bool>> rule_v2;
  // A map of more than kMaxMapCells rows x columns is not drawn (nor its rules' switches
  // computed): the page says so and the CSV keeps its measured cells.
  bool too_large = false;
};

// The most cells (batches x context lengths) one decision map draws: a page stays readable and
// its size and memory stay linear in the table's points, whatever the table holds.
inline constexpr std::size_t kMaxMapCells = 4096;

// One rule's slowdown at one decode point.
struct RegretPoint {
  std::string set;   // "sweep" or "held_out"
  std::string where; // "b=4 ctx=4096 kvh=8 gqa=4 d=128 bs=16 fp16"
  double slowdown = 0.0;
  bool beyond_noise = false;
  std::string chose; // "v1", "v2 partition 512", a configuration key for the table lookup
  std::string best;  // the fastest configuration's key
};

struct RegretView {
  // rule id (engine_rules(), every one) -> its points, sweep and held-out
  std::map<std::string, std::vector<RegretPoint>> points;
  nlohmann::json stored; // the table's own `regret` summary
  bool exact = false;    // from results.jsonl; else from the table's best v1/v2 per point
};

// One prefill configuration's achieved rate on one shape.
struct PrefillBar {
  std::string config;
  double median_s = 0.0;
  double flops_per_s = 0.0;
  bool best = false;
};
struct PrefillShape {
  std::string title; // "b=1 q=128 k=512 h=8 kvh=2 d=128 fp16 causal"
  bool held_out = false;
  std::vector<PrefillBar> bars; // fastest first
};

// Counts and the configurations that did not give a time.
struct MeasurementIssue {
  std::string workload;
  std::string config;
  std::string status;
  std::string reason;
};

// The traffic view (version 4 tables with batches of mixed lengths): each rule's traffic-weighted
// regret as the table stored it, and the batches, most uneven first, with each rule's slowdown.
struct TrafficRule {
  std::string id;    // "batch_rules", then engine_rules() ids in the report's order
  std::string label; // "batch rules (whole batch)"
};
struct TrafficBatch {
  int sequences = 0;
  int max_len = 0;
  double mean_len = 0.0;
  double sum_len = 0.0;
  double weight = 1.0; // how often it occurred in the trace
  bool held_out = false;
  std::string fastest;         // configuration key
  std::string batch_rule;      // the batch rules' choice (configuration key)
  std::string batch_path;      // and the splits that led to it
  std::vector<double> slowdown; // per TrafficRule; negative where the rule has no choice here
};
struct TrafficView {
  bool present = false;
  // Every batch's slowdowns from its measurements in results.jsonl (each configuration charged its
  // own time); false: from the table's best v1 and v2 alone, lower bounds.
  bool exact = false;
  std::vector<TrafficRule> rules;
  nlohmann::json totals; // the table's regret.traffic: {"sweep": {id: ...}, "held_out": ...}
  std::vector<TrafficBatch> batches;
};

struct ReportModel {
  std::string label;  // the source as given
  std::string device; // "AMD EPYC (cpu)"
  bool cpu = false;   // rates in GFLOP/s instead of TFLOP/s
  // The engine rule the table's kernels replace (own_engine_rule): the regret's "kernel set's
  // own rule"; null where they name none.
  const EngineRule* own_rule = nullptr;
  std::vector<std::pair<std::string, std::string>> provenance; // field, value
  nlohmann::json counts;
  std::vector<MeasurementIssue> issues; // failed, fault and error lines
  std::map<std::string, int> skipped;   // reason -> count
  bool has_results = false;
  std::vector<LatencyChart> latency;
  std::vector<DecisionMap> maps;
  bool noisy_listed = false;    // the table lists its noisy decisions (newer tables do)
  std::vector<NoisyMark> noisy; // in the table's order
  RegretView regret;
  std::vector<PrefillShape> prefill;
  TrafficView traffic; // present only for version 4 tables with batches of mixed lengths
};
[[nodiscard]] ReportModel build_report_model(const ReportSource& src);

// The decode calls whose decision differs between two tables: every measured point of either.
struct DecisionDiff {
  std::string call; // "b=4 ctx=4096 h=32 kvh=8 d=128 bs=16 fp16 causal"
  std::string a;    // the first table's choice (configuration key)
  std::string b;    // the second's
  bool family_differs = false;
};
[[nodiscard]] std::vector<DecisionDiff> decision_diffs(const nlohmann::json& a,
                                                       const nlohmann::json& b);

// Linear-interpolated quantile q in [0, 1] of `v` (0 when empty).
[[nodiscard]] double quantile(std::vector<double> v, double q);

// The data tables of a model, views in page order.
[[nodiscard]] std::vector<DataTable> model_tables(const ReportModel& m);
[[nodiscard]] DataTable diff_table(const std::vector<DecisionDiff>& diffs);

} // namespace attn::report
