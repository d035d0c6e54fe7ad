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

// The files kKernelSourcesSha256 hashes (src/io/embedded.h), relative to the source tree, as the
// built-in kernels' provenance lists them ("source_files").
[[nodiscard]] nlohmann::json builtin_kernel_source_files();

// The timing options as the results header and the provenance record them.
[[nodiscard]] nlohmann::json timing_options_json(const TimingOptions& t);

// One line for the timing methods of a table's measurements: methods that differ only in their
// byte counts become one with ranges ("the 48 KiB to 513 MiB it touches flushed ..."); different
// methods are joined with "; ", each with its number of measurements.
[[nodiscard]] std::string summarise_timing_methods(const std::vector<std::string>& methods);

// How the measurements were chosen: {"mode": "exhaustive"}, or for an adaptive search the
// (workload, configuration) pairs it measured, its timings (race timings among them) and the
// exhaustive plan's count they stand against (header.plan.measurements), with its parameters.
[[nodiscard]] nlohmann::json search_provenance(const nlohmann::json& header,
                                               const std::vector<nlohmann::json>& lines);

// A table's search in words: "adaptive: 120 of the 360 measurements an exhaustive sweep makes
// (33%), in 300 timings (240 brief race timings)", or "exhaustive"; and, for an adaptive one,
// a line per decode point with lengths it did not measure, whose decisions rest on a bisection
// step ("fp16 d=128 bs=16 kvh=2 gqa=4 batch=4: ctx 128, 512 not measured: ...").
[[nodiscard]] std::string search_words(const nlohmann::json& table);
[[nodiscard]] std::vector<std::string> inferred_decision_lines(const nlohmann::json& table);

[[nodiscard]] nlohmann::json table_provenance(const nlohmann::json& header,
                                              const std::vector<MeasurementRecord>& records,
                                              const std::vector<nlohmann::json>& lines);

} // namespace attn
