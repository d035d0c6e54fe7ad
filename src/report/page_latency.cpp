// The latency view: per decode point, the best v1 and v2 time over context length (log-log)
// with their interquartile bands, each v2 partition's line, and where the table chooses v2.
#include <algorithm>
#include <limits>
#include <set>

#include "src/report/page_views.h"
#include "src/report/svg_plot.h"

namespace attn::report {

namespace {

std::string latency_svg(const LatencyChart& c, const Palette& pal) {
  constexpr double W = 560, H = 300, L = 64, R = 14, T = 24, B = 40;
  double tmin = std::numeric_limits<double>::infinity(), tmax = 0;
  int cmin = 1 << 30, cmax = 0;
  for (const auto& s : c.series) {
    for (const auto& [ctx, t] : s.by_context) {
      tmin = std::min({tmin, t.median_s, t.p25_s});
      tmax = std::max({tmax, t.median_s, t.p75_s});
      cmin = std::min(cmin, ctx);
      cmax = std::max(cmax, ctx);
    }
  }
  Svg svg(W, H, "chart latency", "decode latency over context length, " + c.title);
  if (cmax == 0) {
    svg.text(W / 2, H / 2, "no measured times", "lbl", "middle");
    return svg.str();
  }
  const auto [ylo, yhi] = padded_log_range(tmin, tmax, 1.25);
  const auto [xlo, xhi] = padded_log_range(cmin, cmax, 1.35);
  const LogAxis x{xlo, xhi, L, W - R};
  const LogAxis y{ylo, yhi, H - B, T};
  // Where the table chooses v2: a shaded band and a dashed line at each switch to v2.
  for (const auto& [from, to] : c.v2) {
    const double x0 = std::max(L, from <= 1 ? L : x(from));
    const double x1 = to == 0 ? W - R : std::min(W - R, x(to));
    if (x1 > x0) {
      svg.rect(x0, T, x1 - x0, H - B - T, "v2zone");
    }
    if (from > 1 && from >= xlo && from <= xhi) {
      svg.line(x(from), T, x(from), H - B, "xline");
      const bool right_half = x(from) > (L + W - R) / 2;
      svg.text(x(from) + (right_half ? -4 : 4), T + 12, "v2 from " + format_count(from), "lbl",
               right_half ? "end" : "start");
    }
  }
  for (double v : log10_ticks(ylo, yhi)) {
    svg.line(L, y(v), W - R, y(v), "grid");
    svg.text(L - 6, y(v) + 4, format_seconds(v), "tick", "end");
  }
  for (double v : log2_ticks(xlo, xhi)) {
    svg.line(x(v), T, x(v), H - B, "grid");
    svg.text(x(v), H - B + 16, format_count((long long)v), "tick", "middle");
  }
  svg.rect(L, T, W - L - R, H - B - T, "frame");
  svg.text((L + W - R) / 2, H - 6, "context length (tokens, log scale)", "lbl", "middle");
  svg.text(L, T - 8, "latency (log scale)", "lbl");
  const auto cls_of = [&pal](const LatencySeries& s) {
    return s.kind == "partition" ? pal.cls(s.partition) : s.kind;
  };
  // Bands first, then partitions under the best lines, then the best lines and their markers.
  for (const auto& s : c.series) {
    if (s.kind == "partition") {
      continue;
    }
    std::vector<double> top, bottom;
    bool any = false;
    for (const auto& [ctx, t] : s.by_context) {
      any = any || t.has_spread;
      top.insert(top.end(), {x(ctx), y(t.p75_s)});
    }
    for (auto it = s.by_context.rbegin(); it != s.by_context.rend(); ++it) {
      bottom.insert(bottom.end(), {x(it->first), y(it->second.p25_s)});
    }
    if (any && s.by_context.size() > 1) {
      top.insert(top.end(), bottom.begin(), bottom.end());
      svg.polygon(top, "band-" + s.kind);
    }
  }
  std::vector<const LatencySeries*> order;
  for (const auto& s : c.series) {
    if (s.kind == "partition") {
      order.push_back(&s);
    }
  }
  for (const auto& s : c.series) {
    if (s.kind != "partition") {
      order.push_back(&s);
    }
  }
  for (const LatencySeries* s : order) {
    std::vector<double> xy;
    for (const auto& [ctx, t] : s->by_context) {
      xy.insert(xy.end(), {x(ctx), y(t.median_s)});
    }
    const std::string k = cls_of(*s);
    if (xy.size() > 2) {
      svg.polyline(xy, "s-" + k);
    }
    for (const auto& [ctx, t] : s->by_context) {
      std::string tip = s->name + " at " + std::to_string(ctx) + ": " + format_seconds(t.median_s);
      if (t.has_spread) {
        tip += " (IQR " + format_seconds(t.p25_s) + " to " + format_seconds(t.p75_s) + ")";
      }
      svg.begin_group(tip);
      svg.circle(x(ctx), y(t.median_s), s->kind == "partition" ? 2.5 : 3.5, "m-" + k);
      svg.end_group();
    }
  }
  for (int ctx : c.within_noise) {
    for (const auto& s : c.series) {
      auto it = s.by_context.find(ctx);
      if (s.kind != "partition" && it != s.by_context.end()) {
        svg.circle(x(ctx), y(it->second.median_s), 7.5, "noise-ring");
      }
    }
  }
  return svg.str();
}

} // namespace

// Partition lines are drawn only from results.jsonl: the legend names those drawn on the page.
std::string latency_legend(const Palette& pal, const ReportModel& a, const ReportModel* b) {
  std::string h =
      "<ul class=\"legend\">" + legend_item(swatch_line("s-v1"), "best v1") +
      legend_item(swatch_line("s-v2"), "best v2 (any partition or the kernel's own splits)");
  std::set<int> drawn;
  for (const ReportModel* m : {&a, b}) {
    for (const auto& c : m ? m->latency : std::vector<LatencyChart>{}) {
      for (const auto& s : c.series) {
        if (s.kind == "partition") {
          drawn.insert(s.partition);
        }
      }
    }
  }
  for (int p : drawn) {
    h += legend_item(swatch_line("s-" + pal.cls(p)), "v2, " + partition_words(p));
  }
  h += legend_item(swatch_box("band-v1", 0.3), "interquartile range");
  h += legend_item(swatch_box("v2zone", 0.25), "table chooses v2");
  h += legend_item(swatch_svg("<circle cx=\"14\" cy=\"6\" r=\"5\" class=\"noise-ring\"/>"),
                   "v1 and v2 within noise");
  return h + "</ul>";
}

std::vector<Part> latency_parts(const ReportModel& m, const Palette& pal) {
  std::vector<Part> out;
  for (const auto& c : m.latency) {
    out.push_back({c.shape_key + " b=" + std::to_string(c.batch),
                   "<figure class=\"card\"><h3>" + esc(c.title) + "</h3>" + latency_svg(c, pal) +
                       "</figure>"});
  }
  return out;
}

} // namespace attn::report
