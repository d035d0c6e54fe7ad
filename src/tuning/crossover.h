// Where decode_v2 starts to beat decode_v1 and keeps beating it along the measured context
// lengths of one shape point: the `v2_from` field of the table (docs/threshold-table.md).
#pragma once
#include <vector>

#include <nlohmann/json.hpp>

#include "src/tuning/decode_point.h" // kInf

namespace attn {

// The best v1 and v2 times at one context length of a shape point (kInf when not measured).
struct ContextTiming {
  int context_len = 0;
  double v1_s = kInf;
  double v2_s = kInf;
};

// Where v2 starts to win and keeps winning over the measured context lengths (sorted).
struct Crossover {
  enum Kind { threshold, always, never } kind = never;
  int from = 0; // the first context length of the final run of v2 wins (kind == threshold)
  [[nodiscard]] nlohmann::json to_json() const; // the number, "always" or "never"
};
[[nodiscard]] Crossover find_crossover(const std::vector<ContextTiming>& sorted);

} // namespace attn
