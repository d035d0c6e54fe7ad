// The --against view: the decode calls the two tables decide differently, v1/v2 switches first.
#include "src/report/page_views.h"

namespace attn::report {

std::string diff_html(const std::vector<DecisionDiff>& diffs) {
  if (diffs.empty()) {
    return "<p class=\"good\">Both tables choose the same configuration for every measured "
           "call.</p>";
  }
  int fam = 0;
  for (const auto& d : diffs) {
    fam += d.family_differs ? 1 : 0;
  }
  std::string h = "<p>" + std::to_string(diffs.size()) + " calls differ, " + std::to_string(fam) +
                  " of them between v1 and v2.</p><div class=\"tw\"><table class=\"data\" "
                  "data-table=\"decision_diff\"><thead><tr><th>call</th><th>A chooses</th><th>B "
                  "chooses</th><th>v1/v2 differs</th></tr></thead><tbody>";
  for (const auto& d : diffs) {
    h += "<tr><td>" + esc(d.call) + "</td><td>" + esc(d.a) + "</td><td>" + esc(d.b) + "</td><td" +
         (d.family_differs ? " class=\"bad\">yes" : ">no") + "</td></tr>";
  }
  return h + "</tbody></table></div>";
}

} // namespace attn::report
