// The threshold table: from checked measurements to the v1/v2 crossover per shape point, the best
// configuration per measured point, a fitted `tiles > k * sm_count` rule and the regret of rules.
#pragma once
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/backends/backend.h"
#include "src/tuning/profile.h"
#include "src/tuning/results_file.h"

namespace attn {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// The best v1 and v2 times at one context length of a shape point (kInf when not measured).
struct ContextTiming {
  int context_len = 0;
  double v1_s = kInf;
  double v2_s = kInf;
};

// Where v2 starts to win and keeps winning over the measured context lengths (sorted).
struct Crossover {
  enum Kind { threshold, always, never } kind = never;
  int from = 0; // the first context length of the final run of v2 wins (kind == threshold)
  [[nodiscard]] nlohmann::json to_json() const; // the number, "always" or "never"
};
[[nodiscard]] Crossover find_crossover(const std::vector<ContextTiming>& sorted);

// One decode workload's measurements, as the rule fit and the regret evaluation see them.
struct DecodePoint {
  int batch = 1;
  int num_heads = 1;
  int num_kv_heads = 1;
  int context_len = 1;
  double best_s = kInf;
  double v1_s = kInf;                      // best decode_v1 time
  std::map<int, double> v2_by_partition;   // best decode_v2 time per partition size
  std::map<std::string, double> by_config; // every timed configuration by key
  [[nodiscard]] bool usable() const { return v1_s < kInf && !v2_by_partition.empty(); }
  // Time of v2 at `partition`, or at the nearest measured partition (log2 distance, ties to the
  // smaller) when that one was not measured here.
  [[nodiscard]] double v2_time(int partition) const;
};

// How tiles are counted in `v2 when tiles > k * sm_count`, partitions = ceil(ctx / partition).
enum class TilesDef { batch_kv_heads_parts, batch_heads_parts, kv_heads_parts, heads_parts };
[[nodiscard]] const char* tiles_name(TilesDef d);
[[nodiscard]] double count_tiles(TilesDef d, const DecodePoint& p, int partition);

struct RuleFit {
  TilesDef tiles = TilesDef::batch_kv_heads_parts;
  double k = 0.0;
  int partition = 512;
  int sm_count = 1;
  double total_regret = 0.0; // sum over points of (chosen time / best time - 1)
  int points = 0;
  [[nodiscard]] bool uses_v2(const DecodePoint& p) const {
    return count_tiles(tiles, p, partition) > k * sm_count;
  }
  [[nodiscard]] nlohmann::json to_json() const;
};

// Minimises total regret over usable points, for every tiles definition and every measured
// partition size; `all` (optional) receives the best fit of each (definition, partition).
[[nodiscard]] RuleFit fit_rule(const std::vector<DecodePoint>& pts, int sm_count,
                               std::vector<RuleFit>* all = nullptr);

// A rule's decision at a point: v2 or not, and the v2 partition it would launch.
struct RuleChoice {
  bool v2 = false;
  int partition = 512;
};
using Rule = std::function<RuleChoice(const DecodePoint&)>;

// vLLM: use_v1 = max_seq_len <= 8192 and (partitions == 1 or num_seqs * num_heads > 512),
// PARTITION_SIZE 512 (SPEC.md "Reference points").
[[nodiscard]] RuleChoice vllm_rule(const DecodePoint& p);
// The seed engine: v2 when num_kv_heads * ceil(seq_len / 512) > 2 * 16 (its hard-coded SM count).
[[nodiscard]] RuleChoice seed_engine_rule(const DecodePoint& p);

struct Regret {
  double mean = 0.0;  // mean over points of (chosen time / best time - 1)
  double worst = 0.0; // max of the same
  int points = 0;
  [[nodiscard]] nlohmann::json to_json() const;
};
[[nodiscard]] Regret regret_of(const std::vector<DecodePoint>& pts, const Rule& rule);
// Regret of an exact configuration choice per point (the table lookup; `pick` gets the point's
// index); a configuration not timed at that point is charged its family's (and partition's) time.
[[nodiscard]] Regret regret_of_configs(const std::vector<DecodePoint>& pts,
                                       const std::function<KernelConfig(std::size_t)>& pick);

// Builds the whole table (docs/threshold-table.md) from the records of a sweep. `provenance` is
// copied in as given; `sm_count` is the device's (GPU SMs, CPU threads).
[[nodiscard]] nlohmann::json build_threshold_table(const std::vector<MeasurementRecord>& records,
                                                   const nlohmann::json& provenance, int sm_count);

// Checks a table against the version-1 schema of docs/threshold-table.md; throws InputError
// naming the first missing or mistyped field ("decode[3].measured[0].best.median_s: ...").
void validate_table(const nlohmann::json& table);

// The human summary `table show` prints.
[[nodiscard]] std::string describe_table(const nlohmann::json& table);

} // namespace attn
