// The human text `attn-tune table show` prints for a threshold table: where it was measured, the
// fitted rule, the regret of each rule, and each shape point's crossover and best configurations.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace attn::cli {

// The summary of a table that passed validate_table (fields it needs are read with at()).
[[nodiscard]] std::string describe_table(const nlohmann::json& table);

// The decisions a table lists as resting on timings within noise (decode[].noisy_decisions,
// docs/threshold-table.md), one line each, those next to a switch first, then those that keep
// the slower median. `listed` is false for tables made before the list existed.
struct NoisyDecisions {
  bool listed = false;
  int count = 0;
  int at_switch = 0;      // next to a switch between v1 and v2: it could move
  int against_median = 0; // the table keeps the family whose median was slower there
  int remeasured = 0;     // already timed again by --remeasure-noisy, still within noise
  std::vector<std::string> lines;
};
[[nodiscard]] NoisyDecisions noisy_decisions_of(const nlohmann::json& table);
// "3 decisions rest on timings within noise (...), 1 of them next to a switch ...": the summary
// that heads the lines, and the remedy to print after them (`command` the sweep to rerun).
[[nodiscard]] std::string noisy_headline(const NoisyDecisions& n);
[[nodiscard]] std::string noisy_remedy(const NoisyDecisions& n, const std::string& command);

} // namespace attn::cli
