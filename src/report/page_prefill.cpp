// The prefill view: each prefill configuration's achieved rate per shape, fastest first.
#include <algorithm>

#include "src/report/page_views.h"
#include "src/report/svg_plot.h"

namespace attn::report {

namespace {

std::string prefill_svg(const PrefillShape& ps, bool cpu) {
  constexpr std::size_t kMaxBars = 14;
  const std::size_t n = std::min(kMaxBars, ps.bars.size());
  constexpr double W = 560, L = 250, R = 70, T = 8, BarH = 18, Gap = 5, B = 36;
  const double H = T + double(n) * (BarH + Gap) + B;
  const double scale = cpu ? 1e-9 : 1e-12;
  double top = 0;
  for (const auto& b : ps.bars) {
    top = std::max(top, b.flops_per_s * scale);
  }
  const std::vector<double> ticks = linear_ticks(0.0, std::max(top, 1e-9), 5);
  const LinearAxis x{0.0, ticks.back(), L, W - R};
  Svg svg(W, H, "chart prefill", "prefill rate per configuration, " + ps.title);
  const double bottom = T + double(n) * (BarH + Gap);
  for (double t : ticks) {
    svg.line(x(t), T, x(t), bottom, "grid");
    svg.text(x(t), bottom + 14, format_sig(t), "tick", "middle");
  }
  svg.text((L + W - R) / 2, H - 6,
           cpu ? "GFLOP/s (longer is better)" : "TFLOP/s (longer is better)", "lbl", "middle");
  for (std::size_t i = 0; i < n; ++i) {
    const PrefillBar& b = ps.bars[i];
    const double y0 = T + double(i) * (BarH + Gap);
    const double v = b.flops_per_s * scale;
    svg.begin_group(b.config + ": " + format_sig(v) + (cpu ? " GFLOP/s" : " TFLOP/s") + ", " +
                    format_seconds(b.median_s));
    svg.text(L - 8, y0 + BarH - 5, b.config, b.best ? "ttl" : "lbl", "end");
    svg.rect(L, y0, std::max(1.0, x(v) - L), BarH, b.best ? "bar-best" : "bar");
    svg.text(x(v) + 5, y0 + BarH - 5, format_sig(v) + (b.best ? " best" : ""),
             b.best ? "ttl" : "tick");
    svg.end_group();
  }
  return svg.str();
}

} // namespace

std::string prefill_html(const ReportModel& m) {
  if (m.prefill.empty()) {
    return "<p class=\"missing\">This table has no prefill points.</p>" +
           tables_html(m, {"prefill"});
  }
  std::string h = "<div class=\"grid2\">";
  for (const auto& ps : m.prefill) {
    h += "<figure class=\"card\"><h3>" + esc(ps.title) + (ps.held_out ? " (held out)" : "") +
         "</h3>" + prefill_svg(ps, m.cpu);
    if (ps.bars.size() > 14) {
      h += "<p class=\"sub\">The " + std::to_string(ps.bars.size() - 14) +
           " slower configurations are in the numbers below.</p>";
    }
    h += "</figure>";
  }
  return h + "</div>" + tables_html(m, {"prefill"});
}

} // namespace attn::report
