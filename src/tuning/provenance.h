// A threshold table's provenance (docs/threshold-table.md): what made its measurements (device,
// kernels and their sources, tool, profile, timing options and method, clocks, seed, shard),
// built from a results.jsonl header and its records by `sweep` at its end and by `merge`.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/backends/timing.h"
#include "src/tuning/results_file.h"

namespace attn {

// The timing options as the results header and the provenance record them.
[[nodiscard]] nlohmann::json timing_options_json(const TimingOptions& t);

// One line for the timing methods of a table's measurements: methods that differ only in their
// byte counts become one with ranges ("the 48 KiB to 513 MiB it touches flushed ..."); different
// methods are joined with "; ", each with its number of measurements.
[[nodiscard]] std::string summarise_timing_methods(const std::vector<std::string>& methods);

[[nodiscard]] nlohmann::json table_provenance(const nlohmann::json& header,
                                              const std::vector<MeasurementRecord>& records,
                                              const std::vector<nlohmann::json>& lines);

} // namespace attn
