// The sweep: a profile's workloads meet a backend's kernel configurations; each pair is checked
// against the reference, then timed, and appended to results.jsonl; the end builds the table.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/backends/backend.h"
#include "src/tuning/adaptive_search.h"
#include "src/tuning/profile.h"
#include "src/tuning/results_file.h"
#include "src/tuning/shard.h"
#include "src/tuning/threshold_table.h"
#include "src/validation/worker_protocol.h"

namespace attn {

struct SweepSummary;

struct SweepOptions {
  std::string out_dir = "attn-tune-out"; // results.jsonl and threshold_table.json go here
  bool resume = false;                   // continue the results.jsonl already in out_dir
  bool retry_faults = false;             // with resume: measure `fault` records again
  bool remeasure_noisy = false;          // with resume: time the noisy decisions' configurations
                                         // again, with remeasure_timing()
  bool wait_for_device = true;           // wait for another process timing on the device
  bool in_process = false;               // measure in this process (no worker, no isolation)
  // What the line a stop signal prints says after "stopped by SIG...": empty, where the results
  // are and that --resume carries on (search-check, which does not resume, says its own).
  std::string stop_note;
  uint64_t seed = 1;                     // test data seeds derive from it and the workload
  int reference_threads = 0;             // 0: all hardware threads
  std::string publish_dir;               // also write <slug>-<profile>.json here when set
  FILE* progress = nullptr;              // progress lines; nullptr: silent
  FILE* info = nullptr;                  // what the workers say, each line once
  bool progress_tty = false;             // rewrite one line in place instead of a line each
  ShardSpec shard;                       // measure only this part of the plan (src/tuning/shard.h)
  // Exhaustive: every (workload, configuration) of the plan. Adaptive: what the search of
  // src/tuning/adaptive_search.h asks for. Unset: the folder's own when resuming, else exhaustive.
  std::optional<SearchMode> search;
  // Called once the table is written, while the sweep still holds the folder's lock: what else
  // the command writes into the folder (its report), so that no second sweep or merge started
  // meanwhile finds the folder free and removes the temporaries of a write under way.
  std::function<void(const SweepSummary&)> while_locked;
};

struct SweepSummary {
  int total = 0;   // measurements the profile asks for
  int resumed = 0; // found in results.jsonl already
  int ok = 0;      // counts of this run's new measurements
  int failed = 0;
  int skipped = 0;
  int errors = 0;
  int faults = 0; // configurations that crashed or hung a worker
  std::string teardown_failure; // what a plugin's destroy did after the work, when it failed
  // With remeasure_noisy: the decisions resting on timings within noise before re-timing, the
  // configurations re-timed for them, and how many of those passed (their lines now stand) or
  // ended otherwise (failed and fault lines stand too; after an error the earlier line stands).
  int noisy_before = 0;
  int remeasure_planned = 0;
  int remeasured = 0;
  int remeasure_other = 0;
  std::string results_path;
  std::string table_path;
  std::string published_path;
  nlohmann::json table;
  SearchMode search = SearchMode::exhaustive; // the search this sweep ran
};

// `sweep --remeasure-noisy` times every configuration timed at a noisy decision's length again
// (NoisyPoint) with this many times the profile's repetitions (min and max) and time budget, and
// its noise target divided by it, so that the timing does not stop at the spread that left the
// call within noise.
inline constexpr int kRemeasureFactor = 4;
[[nodiscard]] TimingOptions remeasure_timing(TimingOptions t);

// Refuses (InputError) a profile whose `configs` name a parameter `be`'s kernels do not declare
// for that family: a misspelt one would make every run of its family a refusal, and the table
// lose that family in silence. The sweep's worker checks it; a caller that opens the backend
// first calls it before saying anything about the sweep.
void check_profile_params(const Profile& prof, const Backend& be);

// Refuses (InputError) a profile one of whose workloads is too big to make (workload_too_big):
// before anything is measured, as it would otherwise end the sweep with exit 4 after every other
// workload.
void check_workloads_fit(const Profile& prof, const std::vector<Workload>& workloads);

// Measures in this process on `be`: a crash ends the sweep (for tests and debuggers).
[[nodiscard]] SweepSummary run_sweep(Backend& be, const Profile& prof, const SweepOptions& opt);

// Makes the backend inside a worker process; what it says through `link` goes to opt.info
// (say: printed once, however many workers say it) or to the progress stream (log).
using BackendMaker = std::function<std::unique_ptr<Backend>(const WorkerLink& link)>;

// Measures in supervised worker processes (unless opt.in_process): a configuration that crashes
// or hangs its worker is recorded as `fault` with the reason, and a fresh worker carries on.
[[nodiscard]] SweepSummary run_sweep_isolated(const BackendMaker& make, const Profile& prof,
                                              const SweepOptions& opt);

// The data seed of a workload: the sweep seed mixed with a hash of the workload key, so a
// resumed sweep regenerates the same inputs.
[[nodiscard]] uint64_t workload_seed(uint64_t sweep_seed, const Workload& w);
// Why results line `line`, measured on `w`, is not of the sweep of seed `sweep_seed`: its data
// came from another seed (a line pasted from another sweep); empty when its seed is the sweep's
// or it records none. `--resume` and `merge` refuse such a line with this.
[[nodiscard]] std::string other_seed_reason(const nlohmann::json& line, const Workload& w,
                                            uint64_t sweep_seed);

} // namespace attn
