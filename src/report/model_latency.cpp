// The latency view's numbers: per decode point (a shape and a batch) the best v1 and v2 time
// over context length with their spread, each v2 partition's line from results, and where the
// table chooses v2.
#include "src/report/model_views.h"

namespace attn::report {

using nlohmann::json;

void add_latency(ReportModel& m, const ReportSource& src, const PartitionTimes& parts) {
  for (const auto& p : src.table.at("decode")) {
    const Shape s = shape_of(p);
    LatencyChart c;
    c.shape_key = map_key(s);
    c.batch = s.batch;
    c.title = "batch " + std::to_string(s.batch) + " · " + map_title(s);
    LatencySeries v1{"best v1", "v1", 0, {}};
    LatencySeries v2{"best v2", "v2", 0, {}};
    for (const auto& e : p.at("measured")) {
      const int ctx = e.at("context_len").get<int>();
      if (has_time(e, "v1")) {
        v1.by_context[ctx] = timed_of(e["v1"]);
      }
      if (has_time(e, "v2")) {
        v2.by_context[ctx] = timed_of(e["v2"]);
      }
      if (e.value("within_noise", false)) {
        c.within_noise.push_back(ctx);
      }
    }
    c.series.push_back(std::move(v1));
    c.series.push_back(std::move(v2));
    auto it = parts.find(decode_point_key(s));
    if (it != parts.end() && it->second.size() > 1) {
      for (const auto& [part, times] : it->second) {
        LatencySeries ps{v2_words(part), "partition", part, {}};
        for (const auto& [ctx, t] : times) {
          ps.by_context[ctx] = Timed{t, t, t, false};
        }
        c.series.push_back(std::move(ps));
      }
    }
    c.v2 = v2_intervals(p);
    m.latency.push_back(std::move(c));
  }
}

} // namespace attn::report
