// Private to src/report: what the page's views share (the partition palette, legend swatches,
// the data tables under each figure) and the entry point of each view, one file per view
// (page_<view>.cpp); report_html.cpp assembles them into the page.
#pragma once
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "src/report/report_model.h"

namespace attn::report {

// The page's style sheet, src/report/report.css, compiled in by CMakeLists.txt.
extern const char kReportCss[];

// Partition sizes get the same colour on every figure of the page.
struct Palette {
  std::vector<int> partitions;
  [[nodiscard]] std::string cls(int partition) const; // "p0" to "p3", CSS classes
};
// The palette of the partitions that win a cell or have a latency line in either model.
[[nodiscard]] Palette palette_of(const ReportModel& a, const ReportModel* b);

[[nodiscard]] std::string esc(std::string_view s); // xml_escape

// A legend entry's swatch: a short line, a filled square or a ring.
[[nodiscard]] std::string swatch_line(const std::string& cls);
[[nodiscard]] std::string swatch_box(const std::string& cls, double opacity = 0.8);
[[nodiscard]] std::string swatch_svg(const std::string& inner);
[[nodiscard]] std::string legend_item(const std::string& swatch, const std::string& text);

// The data tables `ids` of a model (model_tables), each folded under its figure.
[[nodiscard]] std::string tables_html(const ReportModel& m, std::initializer_list<const char*> ids);

// One section's content for one model; keyed parts (a figure per shape) pair up by key.
struct Part {
  std::string key;
  std::string html;
};

// At a glance: where v2 starts to win and what each rule costs (page_glance.cpp).
[[nodiscard]] std::string glance_html(const ReportModel& m);

// Decision maps, one per shape, with the rules' switch lines (page_decision_map.cpp).
// `noisy`: a table on the page lists its noisy decisions, which the maps then frame.
[[nodiscard]] std::string decision_legend(const Palette& pal, bool noisy);
[[nodiscard]] std::vector<Part> map_parts(const ReportModel& m, const Palette& pal);
// "v1 carried from 512, v2 faster by 1.2% within noise 2.0%, the switch at 8192 could lie
// this early": one noisy decision of the table.
[[nodiscard]] std::string noisy_words(const NoisyMark& k);

// Decode latency over context length, one chart per decode point (page_latency.cpp).
[[nodiscard]] std::string latency_legend(const Palette& pal, const ReportModel& a,
                                         const ReportModel* b);
[[nodiscard]] std::vector<Part> latency_parts(const ReportModel& m, const Palette& pal);

// Regret of each rule on the sweep's and the held-out points (page_regret.cpp).
[[nodiscard]] std::string regret_legend();
[[nodiscard]] std::string regret_html(const ReportModel& m);
// The traffic view (tables with batches): each rule's traffic-weighted regret, sweep and held
// out, and the batches by how uneven their lengths are, with what each rule loses on each;
// empty for tables without batches.
[[nodiscard]] std::string traffic_html(const ReportModel& m);
// A rule's slowdowns on one set ("sweep", "held_out"), summarised.
struct Stats {
  int n = 0;
  double mean = 0, p25 = 0, median = 0, p75 = 0, worst = 0;
  int beyond = 0;
};
[[nodiscard]] Stats stats_of(const std::vector<RegretPoint>& pts, const std::string& set);

// Prefill rates per shape (page_prefill.cpp).
[[nodiscard]] std::string prefill_html(const ReportModel& m);

// Provenance and the configurations that gave no time (page_provenance.cpp).
[[nodiscard]] std::string provenance_html(const ReportModel& m);

// The decode calls two tables decide differently, with --against (page_diff.cpp).
[[nodiscard]] std::string diff_html(const std::vector<DecisionDiff>& diffs);

} // namespace attn::report
