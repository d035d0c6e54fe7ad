// Decisions for whole decode batches (a table's `batch_rules`, docs/threshold-table.md): a small
// tree over what the engine knows at dispatch time (the batch's size and the longest, total and
// mean context length) whose leaves name a configuration, fitted to the measured batches by
// least regret; and the traffic-weighted regret of every rule over measured batches.
#pragma once
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "include/attn_tune/threshold_table_reader.hpp"
#include "src/model/kernel_config.h"
#include "src/tuning/decode_point.h"

namespace attn {

// One measured decode batch as the fit and the traffic regret see it.
struct BatchSample {
  attn_tune::BatchFeatures features;
  DecodePoint point; // context_len is the batch's longest
  double weight = 1.0;
  std::vector<KernelConfig> timed; // every configuration with a time there
  // The time of what the table's decode points answer for the batch (its size and longest
  // length, the uniform lookup); infinite where the table has no points.
  double lookup_s = kInf;
  // A grid point (a batch of one length, which the decode points were built on) rather than a
  // measured batch of mixed lengths: the fit trains on it but never scores itself on it.
  bool grid = false;
};

// The splits a tree may make: the features, and how deep it may grow.
inline constexpr const char* kBatchFeatures[] = {"batch", "max_len", "sum_len", "mean_len"};
inline constexpr int kBatchTreeDepth = 3;
// A split must cut the weighted mean slowdown of its node by at least this much (0.5%), so that
// the tree does not split on differences the timings cannot tell apart.
inline constexpr double kBatchSplitGain = 0.005;
// What a split or a configuration must win cross-validated, as a share of the node's batches'
// weight (2% of mean slowdown): CPU timings of similar batches drift by more than the 0.5% from
// run to run, and a quick CPU trace's tree that split on a 0.75% cross-validated gain lost on
// its held-out batches (docs/threshold-table.md).
inline constexpr double kBatchHeldGain = 0.02;
// Nodes of up to this many samples are cross-validated leaving one out; larger ones in this many
// folds.
inline constexpr int kBatchLeaveOneOutMax = 64;
inline constexpr int kBatchFolds = 10;

// The tree fitted to `samples` (usable ones; at least one). Its leaves are a configuration or
// {"lookup": "points"}: read the table's decode points with the batch's size and longest length,
// the uniform lookup. Every choice is judged on samples it was not fitted on, since mixed batches
// are few and their timings noisy:
// * a leaf names the configuration with the least weighted slowdown over its samples, unless the
//   uniform lookup (a candidate whenever every sample has `lookup_s`) costs at most
//   kBatchHeldGain of their weight more on the node's batches than that choice does
//   cross-validated (each fold of batches priced at the configuration chosen without it);
// * a node splits on the feature and threshold (a geometric midpoint between neighbouring values,
//   two samples on each side at least) that cut its weighted slowdown most, when the cut is at
//   least kBatchSplitGain of its weight and the split, cross-validated the same way (threshold
//   and leaves chosen without the fold), beats the leaf on the batches by kBatchHeldGain of
//   their weight.
// Folds hold batches only (`grid` false): grid points always train, since the lookup was built
// on them and would otherwise be judged on its own data.
[[nodiscard]] nlohmann::json fit_batch_tree(const std::vector<BatchSample>& samples);

// A rule's choice for a batch, as a time there: what the traffic regret adds up.
using BatchTime = std::function<double(const BatchSample&)>;

// Traffic-weighted regret over `samples`: total time of the rule's choices against the total of
// the best per batch (each weighted by its count), and the weighted distribution of the
// per-batch slowdown. Unusable samples (one family missing) are left out and counted.
struct TrafficRegret {
  double total_s = 0.0;
  double best_s = 0.0;
  double mean = 0.0;  // weighted mean slowdown
  double p90 = 0.0;   // weighted 90th percentile of the slowdown
  double worst = 0.0; // largest slowdown
  int batches = 0;
  double weight = 0.0;
  [[nodiscard]] double regret() const { return best_s > 0 ? total_s / best_s - 1.0 : 0.0; }
  [[nodiscard]] nlohmann::json to_json() const;
};
[[nodiscard]] TrafficRegret traffic_regret(const std::vector<BatchSample>& samples,
                                           const BatchTime& time);

} // namespace attn
