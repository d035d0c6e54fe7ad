// The provenance view: where, how and with what the table was measured, the measurement counts
// and the configurations that gave no time.
#include "src/report/page_views.h"

namespace attn::report {

std::string provenance_html(const ReportModel& m) {
  std::string h = "<table class=\"kv\"><tbody>";
  for (const auto& [k, v] : m.provenance) {
    h += "<tr><td>" + esc(k) + "</td><td>" + esc(v) + "</td></tr>";
  }
  h += "</tbody></table><h3>Measurements</h3><p>";
  std::string counts;
  for (const auto& [status, n] : m.counts.items()) {
    counts += (counts.empty() ? "" : " · ") + status + " " + n.dump();
  }
  h += esc(counts) + "</p>";
  if (m.issues.empty()) {
    h += m.has_results ? "<p>No configuration failed validation, crashed, hung or ended in an "
                         "error.</p>"
                       : "<p>Without results.jsonl the failed and faulted configurations cannot "
                         "be listed; the counts above are the table's.</p>";
  } else {
    h += "<table class=\"data\"><thead><tr><th>status</th><th>workload</th><th>configuration"
         "</th><th>reason</th></tr></thead><tbody>";
    for (const auto& i : m.issues) {
      h += "<tr><td class=\"bad\">" + esc(i.status) + "</td><td>" + esc(i.workload) + "</td><td>" +
           esc(i.config) + "</td><td>" + esc(i.reason) + "</td></tr>";
    }
    h += "</tbody></table>";
  }
  if (!m.skipped.empty()) {
    h += "<p>Skipped (the kernel cannot run the combination):</p><ul class=\"plain\">";
    for (const auto& [reason, n] : m.skipped) {
      h += "<li>" + std::to_string(n) + " × " + esc(reason) + "</li>";
    }
    h += "</ul>";
  }
  return h + tables_html(m, {"provenance", "measurements"});
}

} // namespace attn::report
