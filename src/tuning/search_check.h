// `attn-tune search-check`: an adaptive sweep judged against an exhaustive sweep of the same
// profile on the same device (docs/adaptive-search.md). Both tables are read through the reader
// engines use, at every uniform decode point the exhaustive sweep measured.
#pragma once
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/tuning/results_file.h"

namespace attn {

// The goals: at most this share of the exhaustive measurements and time, at most this
// mean and worst regret.
inline constexpr double kGoalMeasurements = 0.35;
inline constexpr double kGoalTime = 0.40;
inline constexpr double kGoalMeanRegret = 0.01;
inline constexpr double kGoalWorstRegret = 0.03;

// One table judged on the exhaustive measurements: how often its v1/v2 decision and its exact
// configuration agree with the exhaustive table's, and its regret (the slowdown of its choice
// against the fastest measured configuration, from the exhaustive timings), raw and beyond the
// point's measured noise (the slowdown less the larger interquartile range of the best v1 and v2
// over the faster, never below 0).
//
// Also the same regret split between the profile's grid points and its held-out points (which no
// table holds: their regret is the table's interpolation), and the regret it adds to the
// exhaustive table's at each point (max(0, its regret - the exhaustive table's)): what measuring
// less cost, apart from what the table's own rules cost both tables.
struct TableJudgement {
  // One judged point: the table's choice and its regret, beside the exhaustive table's, and what
  // the choice rests on in the judged table's own sweep (its `basis`):
  // - "held_out": no table holds the point; its lookup reads the measured points around it;
  // - "inferred": that sweep did not time the point in full; the decision came from the lengths
  //   and batches around it, so a loss there is the search's;
  // - "best_untimed": it timed the point, but not, in full, the configuration fastest there in
  //   the exhaustive timings; a loss there is the search's choice of candidates;
  // - "measured": it timed that configuration there in full too. Where the table chose another
  //   one that sweep also timed, `own_timings` says which of the two its own timings put ahead:
  //   "choice_ahead" (the two sweeps rank them differently: a loss there is the noise between
  //   them) or "best_ahead" (the table chose against its own timings: its rules, such as a
  //   decision carried across a tie, cost that loss).
  struct Point {
    std::string workload_key;
    bool held_out = false;
    std::string basis;
    std::string own_timings; // empty where not "measured" or where the choice is the best
    std::string config_key; // the judged table's choice
    double regret = 0.0;
    std::string exhaustive_config_key; // the exhaustive table's choice
    double exhaustive_regret = 0.0;
    double noise = 0.0; // the larger interquartile range of the best v1 and v2 over the faster
    [[nodiscard]] nlohmann::json to_json() const;
  };
  struct Regret {
    int points = 0;
    double mean = 0.0;
    double worst = 0.0;
    std::string worst_point;
    void add(double r, const std::string& point);
    void finish(); // sum to mean
    [[nodiscard]] nlohmann::json to_json() const;
  };
  int points = 0;
  int family_agree = 0;
  int config_agree = 0;
  double mean_regret = 0.0;
  double worst_regret = 0.0;
  double mean_regret_beyond_noise = 0.0;
  double worst_regret_beyond_noise = 0.0;
  std::string worst_point; // the workload with the worst raw regret
  Regret grid;             // raw regret at the grid points
  Regret held_out;         // raw regret at the held-out points
  Regret added;            // raw regret beyond the exhaustive table's at each point
  std::vector<Point> each; // every judged point, in the exhaustive sweep's order
  // The points whose raw regret is above `limit`, the worst first.
  [[nodiscard]] std::vector<Point> above(double limit) const;
  [[nodiscard]] nlohmann::json to_json() const;
};
// `judged_sweep`: the records of the sweep that made `table` (or of its replay), which say what
// each point's choice rests on (Point::basis); without them every grid point counts as measured.
[[nodiscard]] TableJudgement
judge_table(const std::vector<MeasurementRecord>& exhaustive,
            const nlohmann::json& exhaustive_table, const nlohmann::json& table,
            const std::vector<MeasurementRecord>* judged_sweep = nullptr);

// The kernel calls a sweep's lines record: timed repetitions (timing.reps) and warm-up calls
// (timing.warmup_calls), race timings included. On a device where the timed calls, not the
// per-run costs, take the time, their ratio is what the search saves. (Warm-ups run for a set
// time, so short kernels make many of them.)
struct KernelCalls {
  long long timed = 0;
  long long warmup = 0;
};
[[nodiscard]] KernelCalls kernel_calls(const std::vector<nlohmann::json>& lines);

// How far two sweeps of the same profile on the same device disagree: for every pair both timed
// in full with status ok, b's median time over a's; the median of those ratios and their 10th and
// 90th percentiles. The floor under a regret judged across two sweeps. Pairs kDriftOutlier times
// apart or more, either way, are counted and the farthest few named: a disturbance of the machine
// during one sweep (a few seconds of another tenant) moves several consecutive measurements that
// much, each with a small interquartile range, and a regret judged across the two sweeps takes
// such a timing as the truth.
inline constexpr double kDriftOutlier = 1.5;
struct DriftOutlier {
  std::string workload_key;
  std::string config_key;
  double ratio = 0.0; // b over a
};
struct SweepDrift {
  int pairs = 0;
  double median = 0.0;
  double p10 = 0.0;
  double p90 = 0.0;
  int outliers = 0;
  std::vector<DriftOutlier> farthest; // the outliers farthest from 1 first, at most 3
  [[nodiscard]] nlohmann::json to_json() const;
};
[[nodiscard]] SweepDrift sweep_drift(const std::vector<MeasurementRecord>& a,
                                     const std::vector<MeasurementRecord>& b);

// Two exhaustive sweeps of the same plan pooled: each line of `a`, or `b`'s line of the same pair
// where both timed it with status ok and `b`'s median is the faster (a disturbance of the machine
// only ever slows a timing, so the faster of two is the nearer to the kernel's own time). Lines
// that are not measurements, and pairs `b` lacks, stay as `a` has them.
[[nodiscard]] std::vector<nlohmann::json> pool_faster(const std::vector<nlohmann::json>& a,
                                                      const std::vector<nlohmann::json>& b);

// The search replayed on two exhaustive sweeps pooled (pool_faster), judged on the pooled
// timings: the search's own loss where fewer single disturbed timings steer it, beside the
// pooled exhaustive table's own regret on them.
struct PooledReplay {
  int measurements = 0;    // the replayed search's pairs
  int plan = 0;            // the pooled sweep's pairs
  TableJudgement replayed; // the replayed table on the pooled timings
  TableJudgement self;     // the pooled exhaustive table on its own timings
  [[nodiscard]] nlohmann::json to_json() const;
};
[[nodiscard]] PooledReplay replay_pooled(const nlohmann::json& header,
                                         const std::vector<nlohmann::json>& a,
                                         const std::vector<nlohmann::json>& b);

// The control: a second exhaustive sweep of the profile on the same device, judged against the
// first as the adaptive sweep is. Its table's regret on the first sweep's timings is what
// measuring everything again gives: the floor under a regret judged across two sweeps of this
// machine, which the adaptive table's regret includes. Both ways round, and the adaptive table
// (where there is one) on the control's timings too.
struct ControlJudgement {
  std::string folder;
  int measurements = 0;
  SweepDrift drift;                       // the control's timings over the first sweep's
  TableJudgement control;                 // the control's table on the first sweep's timings
  TableJudgement first;                   // the first sweep's table on the control's timings
  std::optional<TableJudgement> adaptive; // the adaptive table on the control's timings
  // The adaptive table's mean and worst regret on the first sweep's timings (what the goals
  // judge), to set beside the floor.
  std::optional<std::pair<double, double>> adaptive_on_first;
  std::optional<PooledReplay> pooled; // the search replayed on the two sweeps pooled
  [[nodiscard]] bool adaptive_within_floor() const {
    return adaptive_on_first && adaptive_on_first->first <= floor_mean() &&
           adaptive_on_first->second <= floor_worst();
  }
  // The larger regret of the two exhaustive tables, each on the other's timings.
  [[nodiscard]] double floor_mean() const {
    return std::max(control.mean_regret, first.mean_regret);
  }
  [[nodiscard]] double floor_worst() const {
    return std::max(control.worst_regret, first.worst_regret);
  }
  [[nodiscard]] bool floor_meets_goals() const {
    return floor_mean() <= kGoalMeanRegret && floor_worst() <= kGoalWorstRegret;
  }
  // The report's "control" object: folder, measurements, drift, control_table,
  // exhaustive_table_on_control, adaptive_table_on_control (where judged), pooled_replay (where
  // replayed) and floor (mean_regret, worst_regret, meets_regret_goals, and adaptive_within_floor
  // where adaptive_on_first is set).
  [[nodiscard]] nlohmann::json to_json() const;
};

// Judges the control (`ctl`: its records and table, read from `folder`) against the first
// exhaustive sweep (`ex`), and, where given, the adaptive table on the control's timings.
[[nodiscard]] ControlJudgement
judge_control(const std::string& folder, const std::vector<MeasurementRecord>& ex,
              const nlohmann::json& ex_table, const std::vector<MeasurementRecord>& ctl,
              const nlohmann::json& ctl_table, const std::vector<MeasurementRecord>* ad = nullptr,
              const nlohmann::json* ad_table = nullptr);

// The table a results file's header and lines make, as `sweep` and `merge` build it.
[[nodiscard]] nlohmann::json table_of_results(const nlohmann::json& header,
                                              const std::vector<nlohmann::json>& lines);

// The adaptive search replayed on the exhaustive lines (src/tuning/adaptive_search.h: every run
// answered with the exhaustive timing of that pair): the search's own loss, free of the noise
// between two sweeps. Its lines and table.
struct ReplayedSearch {
  nlohmann::json header; // the exhaustive sweep's, its search adaptive (search_header)
  std::vector<nlohmann::json> lines;
  nlohmann::json table;
};
[[nodiscard]] ReplayedSearch replay_on(const nlohmann::json& exhaustive_header,
                                       const std::vector<nlohmann::json>& exhaustive_lines);

} // namespace attn
