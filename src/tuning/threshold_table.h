// The threshold table: from the checked measurements of a sweep to the JSON document that engines
// read (docs/threshold-table.md), assembled from the crossover, rule fit and regret units.
#pragma once
#include <vector>

#include <nlohmann/json.hpp>

#include "include/attn_tune/threshold_table_reader.hpp"

#include "src/backends/backend.h"
#include "src/tuning/crossover.h"
#include "src/tuning/decode_point.h"
#include "src/tuning/profile.h"
#include "src/tuning/regret.h"
#include "src/tuning/results_file.h"
#include "src/tuning/rule_fit.h"
#include "src/tuning/table_schema.h"

namespace attn {

// Builds the whole table (docs/threshold-table.md) from the records of a sweep. `provenance` is
// copied in as given; `sm_count` is the device's (GPU SMs, CPU threads).
[[nodiscard]] nlohmann::json build_threshold_table(const std::vector<MeasurementRecord>& records,
                                                   const nlohmann::json& provenance, int sm_count);

// The table lookup's query for a decode workload (its shape, batch and longest context length).
[[nodiscard]] attn_tune::Query decode_query(const Workload& w);

// One decode workload of a sweep and its measurements as the crossover, the rule fit and the
// regret see them (noise included), sweep and held-out workloads alike, in first-seen order.
struct WorkloadPoint {
  Workload workload;
  DecodePoint point;
};
[[nodiscard]] std::vector<WorkloadPoint>
decode_workload_points(const std::vector<MeasurementRecord>& records);
// The same for the decode batches of mixed lengths (the table's `batches`), which have no place
// on a shape's context axis.
[[nodiscard]] std::vector<WorkloadPoint>
decode_batch_points(const std::vector<MeasurementRecord>& records);

// A decision of the table that rests on timings within noise (crossover.h), with the workload
// measured there and every decode_v1 and decode_v2 configuration timed on it: what
// `sweep --remeasure-noisy` times again. All of them, not only the two fastest: a fastest one
// timed again with more repetitions would otherwise lose its place to a sibling whose few noisy
// repetitions happened to come out low. Sweep points only, in the table's order.
struct NoisyPoint {
  Workload workload;
  NoisyDecision decision;
  std::vector<KernelConfig> configs; // in the order the results hold them
};
[[nodiscard]] std::vector<NoisyPoint>
noisy_decision_points(const std::vector<MeasurementRecord>& records);

} // namespace attn
