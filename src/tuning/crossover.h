// Where decode_v2 beats decode_v1 along the measured context lengths of one shape point, telling
// real wins from differences within the measured noise: the `v2_intervals` of the table, and its
// `noisy_decisions`, the lengths whose decision no measurement of their own supports.
#pragma once
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/tuning/decode_point.h" // kInf

namespace attn {

// The best v1 and v2 times at one context length of a shape point (kInf when not measured) and
// the interquartile ranges of those two measurements (0 when no spread was recorded).
struct ContextTiming {
  int context_len = 0;
  double v1_s = kInf;
  double v2_s = kInf;
  double v1_iqr_s = 0.0;
  double v2_iqr_s = 0.0;
};

// v1 against v2 at one context length. The two are within noise when their medians differ by no
// more than the larger of their interquartile ranges; a missing family always loses, beyond noise.
struct Comparison {
  bool measured = false; // at least one family has a time
  bool both = false;     // both families have a time (margin and noise are finite)
  bool v2_faster = false;
  bool within_noise = false;
  double margin = kInf; // slower median / faster median - 1
  double noise = 0.0;   // larger interquartile range / faster median
};
[[nodiscard]] Comparison compare(const ContextTiming& t);

// Where the decision switches between two neighbouring measured lengths a < b whose decisions
// differ: the length where log(v2 / v1), interpolated linearly in log context length between the
// two, crosses zero, rounded up and kept in (a, b] so that both keep their own decisions; b when
// a family is missing at either.
[[nodiscard]] int switch_between(const ContextTiming& a, const ContextTiming& b);

// A context range [from, to) where v2 is chosen; `to` empty: no upper end.
struct V2Interval {
  int from = 1;
  std::optional<int> to;
  auto operator<=>(const V2Interval&) const = default;
};

// A decision of the table that rests on timings within noise where it matters: a measured length
// whose own v1/v2 comparison is within noise, so that its decision was carried over from another
// length, and either its run of within-noise lengths borders a switch (re-measuring can move the
// switch) or the run holds two or more lengths whose faster medians all favour the other family
// (re-measuring can reveal a switch the noise hides). A lone tie the table settles one way or the
// other costs less than the noise and is not one. docs/threshold-table.md.
struct NoisyDecision {
  int context_len = 0;
  bool v2 = false;        // the table's decision here
  bool v2_faster = false; // whose median was lower here (by no more than the noise)
  double margin = 0.0;    // as in Comparison
  double noise = 0.0;
  // The beyond-noise length whose decision this one carries: the nearest shorter one, else (for
  // leading lengths) the first longer one; empty when no length is beyond noise (v1 stands).
  std::optional<int> carried_from;
  // The first measured length of the other family's run right after this length's run of
  // within-noise lengths (the table's switch lies between that run and it): the switch could lie
  // anywhere in that run, so re-measuring it can move the switch.
  std::optional<int> switch_at;
  // Every length of this run has the other family's median faster (and there are two or more).
  bool hides_switch = false;
  // The table keeps the family whose median was slower here.
  [[nodiscard]] bool against_median() const { return v2 != v2_faster; }
};

// The v1/v2 decision over context length. Each measured length decides for its winner when the
// win is beyond noise and keeps the previous length's decision when it is within noise; leading
// lengths within noise take the first decision beyond noise, and v1 stands where none is. Runs of
// equal decisions become intervals that switch between the last measured length of one run and
// the first of the next, at switch_between(); the first run starts at context 1 and the last one
// is open, so every context length has a decision.
struct Crossover {
  std::vector<V2Interval> v2;          // ascending, disjoint, none empty
  std::vector<Comparison> comparisons; // index for index with the timings given
  std::vector<NoisyDecision> noisy;    // ascending context length; empty when every decision
                                       // rests on a difference beyond the noise
  [[nodiscard]] bool uses_v2(int context_len) const;
  [[nodiscard]] nlohmann::json intervals_json() const; // [[from, to or null], ...]
  // The single-threshold form when the decision has one: a context length (v2 from there on),
  // "always" or "never"; empty when v2 stops winning at some length.
  [[nodiscard]] std::optional<nlohmann::json> v2_from_json() const;
};
[[nodiscard]] Crossover find_crossover(const std::vector<ContextTiming>& sorted);

} // namespace attn
