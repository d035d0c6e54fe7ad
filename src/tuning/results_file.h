// results.jsonl, the sweep's durable log: a header line naming the profile, device and seed, then
// one line per (workload, configuration) outcome, each fsynced; reading it back and resuming it.
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/model/kernel_config.h"
#include "src/model/workload.h"

namespace attn {

inline constexpr const char* kResultsSchema = "attn-tune/results";
inline constexpr int kResultsVersion = 1;
// The most measurements one plan may name (a header's plan.measurements).
inline constexpr int64_t kMaxPlanMeasurements = 1'000'000'000;

// One line of results.jsonl reduced to what the table needs.
struct MeasurementRecord {
  Workload workload;
  KernelConfig config;
  std::string status; // "ok", "failed", "skipped", "error", "fault"
  double median_s = 0.0;
  double p25_s = 0.0; // the interquartile range, which tells a win from noise; equal to
  double p75_s = 0.0; // median_s for lines that did not record it
  std::string method; // timing method, for provenance
  // Timed again by `sweep --remeasure-noisy`: its line has `remeasure_factor`.
  bool remeasured = false;
  // An adaptive search's brief race timing that no full timing followed: the configuration
  // lost the race (src/tuning/adaptive_search.h). The table does not choose from these.
  bool brief = false;
  // An adaptive search's line of a decode grid point: the context lengths of its shape (the
  // lengths the table's decisions cover, measured or inferred); empty otherwise.
  std::vector<int> search_grid;
};

// Reads results.jsonl: the header and every complete measurement line. A last line without its
// newline (a measurement killed mid-write) is ignored and reported through `valid_bytes`, the
// length of the file's valid prefix. Throws InputError on a corrupt complete line.
struct ResultsFile {
  nlohmann::json header;             // null when the file is empty
  std::vector<nlohmann::json> lines; // measurement records
  std::size_t valid_bytes = 0;
  bool truncated_tail = false;
  // The last `search_end` line: an adaptive search wrote it when it had nothing left to measure
  // (null when none did, or when measurement lines follow it: sweep --remeasure-noisy's).
  nlohmann::json search_end;
  bool search_reopened = false; // a search_end line was followed by measurement lines
};
[[nodiscard]] ResultsFile read_results(const std::string& path);
// Whether two headers' `device` objects name the same device, as a resumed sweep must share it
// with the one that started its file (backend, name, UUID and CPU worker threads).
[[nodiscard]] bool same_device(const nlohmann::json& a, const nlohmann::json& b);
// One record per (workload, configuration): where a measurement was retried (an `error` line
// followed by a newer one), the last line counts.
[[nodiscard]] std::vector<MeasurementRecord> to_records(const std::vector<nlohmann::json>& lines);

// The kernels a results file or table describes ({"source": "built-in" | "plugin", ...},
// Backend::kernels()), as words: "the built-in attn-tune kernels", "plugin NAME VERSION
// (LIBRARY, sha256 0123456789ab)".
[[nodiscard]] std::string kernels_label(const nlohmann::json& kernels);
// What makes two descriptions the same kernels: the source, and a plugin's name and library hash.
[[nodiscard]] std::string kernels_identity(const nlohmann::json& kernels);

// Appends one line and makes it durable before returning, so a kill loses at most the
// measurement in flight.
class DurableAppender {
public:
  explicit DurableAppender(const std::string& path); // throws InputError when it cannot open
  ~DurableAppender();
  DurableAppender(const DurableAppender&) = delete;
  DurableAppender& operator=(const DurableAppender&) = delete;
  void append(const nlohmann::json& j);

private:
  std::string path_;
  int fd_ = -1;
};

// The search a results header names ("exhaustive" or "adaptive"): exhaustive where it names none.
[[nodiscard]] std::string search_mode_of(const nlohmann::json& header);
// Whether a measurement line is an adaptive search's brief race timing (search.stage "race").
[[nodiscard]] bool is_race_line(const nlohmann::json& line);

// "workload key | config key": what a measurement line is identified by when resuming.
[[nodiscard]] std::string record_key(const std::string& workload_key,
                                     const std::string& config_key);

// results.jsonl opened for a sweep: the keys already measured and the appender for new lines.
struct OpenedResults {
  std::set<std::string> done; // record_key of every measurement line already in the file
  std::vector<nlohmann::json> lines; // the measurement lines already in the file
  bool search_ended = false;         // the file already holds a search_end line
  std::unique_ptr<DurableAppender> out;
};

// Opens `path` for the sweep described by `header` (type, schema, version, profile,
// profile_hash, device, seed, ...). An empty or absent file gets `header` as its first line.
// A file with content needs `resume` and the same profile hash, device (backend, name, uuid,
// threads), seed, timing mode (absent: events), search mode (absent: exhaustive) and shard
// (absent: 0/1), else InputError saying
// which differs; a half-written last line is cut off. Measurements recorded as `error` are not done
// until they have been retried once; those recorded as `fault` (they crashed or hung a worker) are
// done unless `retry_faults`.
[[nodiscard]] OpenedResults open_results(const std::string& path, const nlohmann::json& header,
                                         bool resume, bool retry_faults = false);

// Appends one line to the results file of a worker that died: a half-written last line it left
// is cut off first, so the new line starts a line of its own.
void append_after_valid(const std::string& path, const nlohmann::json& j);

// The current UTC time as "2026-11-30T21:44:05Z".
[[nodiscard]] std::string utc_now();
// The line an adaptive search appends when it has nothing left to measure (sweep, and the
// folders merge and search-check --replay write for such a search).
[[nodiscard]] nlohmann::json search_end_line(int measured_pairs, int64_t exhaustive_pairs);

} // namespace attn
