// A report's model assembled from its source: each view filled in page order by its own file
// (model_views.h), the per-partition times and regret inputs read once from results.jsonl.
#include "src/report/report_model.h"

#include <vector>

#include "src/report/model_views.h"
#include "src/tuning/threshold_table.h"

namespace attn::report {

ReportModel build_report_model(const ReportSource& src) {
  ReportModel m;
  m.label = src.given;
  m.has_results = !src.results_path.empty();
  add_provenance(m, src);
  m.counts = src.table.at("measurement_counts");
  add_issues(m, src);

  PartitionTimes parts;
  std::vector<RegretInput> inputs;
  if (m.has_results) {
    for (const auto& wp : decode_workload_points(src.records)) {
      const Shape s = shape_of(wp.workload);
      for (const auto& [part, t] : wp.point.v2_by_partition) {
        parts[decode_point_key(s)][part][wp.workload.context_len] = t;
      }
      inputs.push_back({wp.point, s, wp.workload.held_out});
    }
    m.regret.exact = true;
  } else {
    inputs = regret_inputs_from_table(src.table);
  }
  add_latency(m, src, parts);
  add_maps(m, src);
  add_regret(m, src, inputs);
  add_prefill(m, src);
  add_traffic(m, src);
  return m;
}

} // namespace attn::report
