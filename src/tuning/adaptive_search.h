// The adaptive search of `sweep --search adaptive` (docs/adaptive-search.md): which (workload,
// configuration) pairs to measure, and how, given what has been measured so far. It is a pure
// function of the plan and the observations, so a resumed sweep replays the same decisions from
// results.jsonl, a shard's search is fixed by its plan and seed, and `search-check` can replay it
// on an exhaustive sweep's measurements.
//
// Three rules:
//  - racing: the first measured point of a group (the points that share heads, dtypes, head size,
//    block size and mask, over every batch and length) times every configuration briefly
//    (race_timing), drops those slower than their family's best by more than kRaceMargin plus
//    both relative interquartile ranges, and times the fastest kRaceSurvivors of each family left
//    in full, with the profile's timing. Every later point of the group starts from the
//    configurations that survived at the nearest measured point of it (a configuration that lost
//    by more than the margin there is not tried), adds the fastest of each family at its measured
//    neighbours along the context and batch axes, and races them the same way when there are more
//    than kDirectCandidates, else times them in full; a point farther than kRaceReach doublings
//    from every measured point of its group races every configuration again, less those that
//    lost by more than kHopelessMargin on both sides of it. The table chooses from full timings
//    only;
//  - bisection: along a decode shape's context axis it measures the ends, then the middle of any
//    two measured neighbours unless the medians at both favour the family the table carries
//    across them (a win beyond noise, or a tie leaning that way), down to adjacent grid lengths,
//    so a switch (or one the noise may hide) is exact to the profile's grid;
//    two lengths that one family wins more than kAgreeSpan grid steps apart get a look between
//    them, and so do two whose best configurations of the family carried across each went
//    untimed at the other, or each lost at the other by more than kRaceMargin plus both noises
//    (the lengths between take the nearer one's, so the middle says which);
//  - reuse across batches: a shape starts at the two lengths where the previous batch of its
//    group switched, and goes out to an end only when the winner there says the switch moved.
// Prefill, held-out and mixed-batch points are measured as any point of their group.
#pragma once
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/backends/timing.h"
#include "src/model/kernel_config.h"
#include "src/model/workload.h"
#include "src/tuning/crossover.h"

namespace attn {

enum class SearchMode { exhaustive, adaptive };
[[nodiscard]] const char* search_mode_name(SearchMode m);
[[nodiscard]] SearchMode parse_search_mode(const std::string& s); // throws InputError

enum class SearchStage { race, full };
[[nodiscard]] const char* search_stage_name(SearchStage s);

// A racing configuration is dropped when its median exceeds its family's best median by more than
// this fraction plus the two measurements' relative interquartile ranges.
inline constexpr double kRaceMargin = 0.10;
// Two measured lengths that one family wins beyond noise settle the lengths between them only when
// they are at most this many grid steps apart; farther apart, the search looks at the middle.
inline constexpr int kAgreeSpan = 2;
// A point races every configuration again when no measured point of its group is within this
// many doublings of its lengths (decode: the context; prefill: q and k), whatever the batch. 3
// until 2026-12-04: on quick, 512 tokens lay 3 doublings from both measured ends (64 and 4096),
// and the configuration that won there by a third was never timed (docs/adaptive-search.md).
inline constexpr double kRaceReach = 2.0;
// At most this many configurations of a family survive a race. 2 until 2026-12-06: with the
// fastest of each family at a point's measured neighbours among its candidates, the second
// survivor added 5 to 8 points to the measurement share of replayed default-decode-b16 sweeps
// (38-41% against 30-35%) and bought regret back in two of six quick sweeps only
// (docs/adaptive-search.md).
inline constexpr int kRaceSurvivors = 1;
// A point that races every configuration again (kRaceReach) leaves out those slower than their
// family's fastest by more than this fraction plus both relative interquartile ranges wherever its
// group timed them, when that was at lengths on both sides of it (or at its own length).
inline constexpr double kHopelessMargin = 0.25;
// A point with at most this many candidates times them in full without a race.
inline constexpr int kDirectCandidates = 4;
// A race timing takes 1/kRaceShare of the profile's time budget and repetitions.
inline constexpr int kRaceShare = 8;
// A results header's "search" object: the mode, and for an adaptive search its rules' parameters
// and (given the profile's timing) its race timing.
[[nodiscard]] nlohmann::json search_header(SearchMode m, const TimingOptions* timing);
// The timing of a race: one warm-up call, the profile's noise target, a third of its minimum
// repetitions (at least 3), 1/kRaceShare of its maximum repetitions, time and warm-up time.
[[nodiscard]] TimingOptions race_timing(TimingOptions t);

// What results.jsonl says about one (workload, configuration) pair: its last line's status, stage
// and timing.
struct SearchObservation {
  std::string status;
  SearchStage stage = SearchStage::full;
  double median_s = 0.0;
  double p25_s = 0.0;
  double p75_s = 0.0;
  [[nodiscard]] bool ok() const { return status == "ok" && median_s > 0; }
  [[nodiscard]] double noise() const; // interquartile range / median
};
using SearchObservations = std::map<std::string, SearchObservation>; // by record_key
// Adds (or replaces) the observation of one measurement line.
void observe(SearchObservations& obs, const nlohmann::json& line);
[[nodiscard]] SearchObservations search_observations(const std::vector<nlohmann::json>& lines);
// The stage a measurement line records: race for a line whose search.stage says so.
[[nodiscard]] SearchStage line_stage(const nlohmann::json& line);

struct SearchPoint {
  Workload workload;
  std::vector<KernelConfig> configs;
};

struct SearchRun {
  KernelConfig config;
  SearchStage stage = SearchStage::full;
  std::string why; // why this point is measured, and why this configuration
};

class AdaptiveSearch {
public:
  explicit AdaptiveSearch(std::vector<SearchPoint> points);
  [[nodiscard]] std::size_t size() const { return points_.size(); }
  [[nodiscard]] const SearchPoint& point(std::size_t i) const { return points_[i]; }
  // The first point, in search order, that the search wants and whose runs are not all done,
  // with why it wants it; nullopt when the search is complete.
  struct Due {
    std::size_t index = 0;
    std::string why; // "bisection: ctx 512 had v1, ctx 4096 v2", "a prefill workload", ...
  };
  [[nodiscard]] std::optional<Due> next_point(const SearchObservations& obs) const;
  // The runs still to do at point i: race runs first, then the full runs of what they leave.
  [[nodiscard]] std::vector<SearchRun> runs_at(std::size_t i, const SearchObservations& obs) const;
  // The context lengths of the decode shape point i belongs to, ascending (empty for a point
  // outside the grid: prefill, held-out, a mixed batch).
  [[nodiscard]] std::vector<int> shape_grid(std::size_t i) const;

private:
  enum class Winner { none, v1, v2, tie };
  struct Shape {
    int batch = 1;
    std::vector<std::size_t> by_context; // point indices, ascending context length
  };
  struct Scope {
    std::vector<std::vector<Shape>> groups; // decode grid: groups of shapes, batches ascending
    std::vector<std::size_t> others;        // prefill, held-out and mixed points
  };
  [[nodiscard]] const std::string& key(std::size_t i) const { return keys_[i]; }
  [[nodiscard]] const SearchObservation* seen(std::size_t i, const KernelConfig& c,
                                              const SearchObservations& obs) const;
  [[nodiscard]] bool measured(std::size_t i, const SearchObservations& obs) const;
  [[nodiscard]] std::vector<KernelConfig> contenders(std::size_t i,
                                                     const SearchObservations& obs) const;
  // What the observations say of every point, computed once per call: whether it has a full
  // timing, and its contenders' keys.
  struct Pools {
    std::vector<char> measured;
    std::vector<std::vector<std::string>> contenders;
  };
  [[nodiscard]] Pools pools(const SearchObservations& obs) const;
  // Doublings between two points' lengths: context (decode), q plus k (prefill).
  [[nodiscard]] double distance(std::size_t a, std::size_t b) const;
  // The configurations to try at point i, with why (`neighbour_why`: the reason of each one added
  // as the fastest of its family at a measured neighbour, by key).
  [[nodiscard]] std::vector<KernelConfig>
  candidates(std::size_t i, const Pools& pools, const SearchObservations& obs, std::string& why,
             std::map<std::string, std::string>& neighbour_why) const;
  // The measured decode grid points next to point i: the nearest shorter and longer of its batch,
  // and the nearest smaller and larger batch at its length.
  [[nodiscard]] std::vector<std::size_t> neighbours(std::size_t i, const Pools& pools) const;
  // Whether configuration c lost by more than kHopelessMargin wherever i's group timed it, at
  // lengths on both sides of i's (or at i's own).
  [[nodiscard]] bool hopeless(std::size_t i, const KernelConfig& c,
                              const SearchObservations& obs) const;
  [[nodiscard]] std::vector<SearchRun> runs_with(std::size_t i, const SearchObservations& obs,
                                                 const Pools& pools) const;
  // The fastest configuration of family f timed in full at point i (nullptr: none).
  [[nodiscard]] const KernelConfig* best_of(std::size_t i, Family f,
                                            const SearchObservations& obs) const;
  [[nodiscard]] ContextTiming timing_at(std::size_t i, const SearchObservations& obs) const;
  [[nodiscard]] Winner winner(std::size_t i, const SearchObservations& obs) const;
  // The points of a shape the search wants, with why, in the order they are due; `complete` is
  // set when every wanted point is done and none is to be added.
  [[nodiscard]] std::vector<std::pair<std::size_t, std::string>>
  wanted(const std::vector<Shape>& group, std::size_t s, const SearchObservations& obs,
         const Pools& pools, bool& complete) const;

  std::vector<SearchPoint> points_;
  std::vector<std::string> keys_;
  std::vector<std::size_t> pool_of_;                   // index into pool_members_
  std::vector<std::vector<std::size_t>> pool_members_; // the points of each group (pool_key)
  std::vector<std::size_t> scope_of_;
  std::vector<Scope> scopes_;
  std::map<std::size_t, std::size_t> grid_shape_; // point -> index into shape_grids_
  std::vector<std::vector<int>> shape_grids_;
};

// Runs the search against measurements already made (an exhaustive sweep's lines, by record key)
// instead of a device: every run the search asks for is answered with that pair's line (a race
// run with its full timing). Returns the lines the search would have written, in order; a pair
// the measurements lack answers `error`. What `search-check` compares with the real search.
[[nodiscard]] std::vector<nlohmann::json>
replay_search(const AdaptiveSearch& search, const std::map<std::string, nlohmann::json>& measured);

} // namespace attn
