// The --against view's numbers: every decode call measured in either table, looked up in both
// the way an engine would, kept where the two choose differently.
#include <algorithm>
#include <set>
#include <string>

#include "include/attn_tune/threshold_table_reader.hpp"
#include "src/report/model_views.h"

namespace attn::report {

using nlohmann::json;

std::vector<DecisionDiff> decision_diffs(const json& a, const json& b) {
  const attn_tune::ThresholdTableReader ra(a);
  const attn_tune::ThresholdTableReader rb(b);
  std::set<std::string> seen;
  std::vector<DecisionDiff> out;
  const auto check = [&](const Shape& s, int ctx) {
    const std::string call = point_words(s, ctx);
    if (!seen.insert(call).second) {
      return;
    }
    const attn_tune::Query q = query_of(s, ctx);
    // A table without decode points answers nothing; say so in its column.
    const auto choose = [&q](const attn_tune::ThresholdTableReader& r) {
      if (!r.json().at("decode").empty()) {
        return r.lookup(q);
      }
      attn_tune::Choice none;
      none.config_key = "(no decode points)";
      return none;
    };
    const attn_tune::Choice ca = choose(ra);
    const attn_tune::Choice cb = choose(rb);
    if (ca.config_key != cb.config_key) {
      out.push_back({call, ca.config_key, cb.config_key, ca.family != cb.family});
    }
  };
  for (const json* t : {&a, &b}) {
    for (const auto& p : t->at("decode")) {
      for (const auto& e : p.at("measured")) {
        check(shape_of(p), e.at("context_len").get<int>());
      }
    }
    for (const auto& h : t->value("held_out", json::array())) {
      check(shape_of(h), h.at("context_len").get<int>());
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const DecisionDiff& x, const DecisionDiff& y) {
    return x.family_differs > y.family_differs;
  });
  return out;
}

} // namespace attn::report
