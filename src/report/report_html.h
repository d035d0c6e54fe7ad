// `attn-tune report` as a page: one self-contained XHTML-compatible HTML file with inline SVG and
// no scripts, readable in light and dark mode and on paper; and the same numbers as CSV files.
#pragma once
#include <string>
#include <vector>

#include "src/report/report_model.h"

namespace attn::report {

// The page for one model, or for two side by side (`b` and `diffs` non-null: --against).
// `generator` names the tool in the footer ("attn-tune 0.1.0 (27fc13bdf667)").
[[nodiscard]] std::string render_report_html(const ReportModel& a, const ReportModel* b,
                                             const std::vector<DecisionDiff>* diffs,
                                             const std::string& generator);

// One table as RFC 4180 CSV (header line, CRLF-free "\n" line ends, quotes where needed), with
// a leading `table` column holding `source` on every row.
[[nodiscard]] std::string to_csv(const DataTable& t, const std::string& source);

// Writes `folder`/<id>.csv for every data table of `a` (and `b`, rows appended, and
// decision_diff.csv with --against), each file atomically; returns the paths written.
std::vector<std::string> write_report_csv(const std::string& folder, const ReportModel& a,
                                          const ReportModel* b,
                                          const std::vector<DecisionDiff>* diffs);

} // namespace attn::report
