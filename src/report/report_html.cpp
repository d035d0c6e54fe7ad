// The report page: sections in reading order (at a glance, provenance, decision maps, decode
// latency, regret, prefill, decisions that differ), each figure an inline SVG whose colours come
// from the page's style sheet so that light, dark and print modes each pick readable ones.
#include "src/report/report_html.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "src/io/atomic_file.h"
#include "src/model/errors.h"
#include "src/report/svg_plot.h"

namespace attn::report {

// The page's style sheet, src/report/report.css, compiled in by CMakeLists.txt.
extern const char kReportCss[];

namespace {

// Partition sizes get the same colour on every figure of the page.
struct Palette {
  std::vector<int> partitions;
  [[nodiscard]] std::string cls(int partition) const {
    const auto it = std::find(partitions.begin(), partitions.end(), partition);
    const auto i = it == partitions.end() ? 0 : std::size_t(it - partitions.begin());
    return "p" + std::to_string(i % 4);
  }
};

Palette palette_of(const ReportModel& a, const ReportModel* b) {
  std::set<int> parts;
  for (const ReportModel* m : {&a, b}) {
    if (m == nullptr) {
      continue;
    }
    for (const auto& dm : m->maps) {
      for (const auto& [bc, c] : dm.cells) {
        if (c.v2) {
          parts.insert(c.partition);
        }
      }
    }
    for (const auto& lc : m->latency) {
      for (const auto& s : lc.series) {
        if (s.kind == "partition") {
          parts.insert(s.partition);
        }
      }
    }
  }
  return {{parts.begin(), parts.end()}};
}

std::string esc(std::string_view s) { return xml_escape(s); }

// A legend entry's swatch: a short line, a filled square or a ring.
std::string swatch_line(const std::string& cls) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 28 12\" aria-hidden=\"true\">"
         "<line x1=\"1\" y1=\"6\" x2=\"27\" y2=\"6\" class=\"" +
         cls + "\"/></svg>";
}
std::string swatch_box(const std::string& cls, double opacity = 0.8) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 28 12\" aria-hidden=\"true\">"
         "<rect x=\"6\" y=\"0\" width=\"16\" height=\"12\" class=\"" +
         cls + "\" style=\"fill-opacity:" + coord(opacity) + "\"/></svg>";
}
std::string swatch_svg(const std::string& inner) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 28 12\" aria-hidden=\"true\">" +
         inner + "</svg>";
}
std::string legend_item(const std::string& swatch, const std::string& text) {
  return "<li>" + swatch + "<span>" + esc(text) + "</span></li>";
}

std::string data_table_html(const DataTable& t) {
  std::string h = "<details><summary>Numbers: " + esc(t.title) + " (" +
                  std::to_string(t.rows.size()) + " rows; <code>" + esc(t.id) +
                  ".csv</code> with --format csv)</summary><div class=\"tw\"><table class=\"data\" "
                  "data-table=\"" +
                  esc(t.id) + "\"><thead><tr>";
  for (const auto& c : t.columns) {
    h += "<th scope=\"col\">" + esc(c) + "</th>";
  }
  h += "</tr></thead><tbody>";
  for (const auto& r : t.rows) {
    h += "<tr>";
    for (const auto& v : r) {
      h += "<td>" + esc(v) + "</td>";
    }
    h += "</tr>";
  }
  return h + "</tbody></table></div></details>";
}

std::string tables_html(const ReportModel& m, std::initializer_list<const char*> ids) {
  std::string h;
  const std::vector<DataTable> all = model_tables(m);
  for (const char* id : ids) {
    for (const auto& t : all) {
      if (t.id == id) {
        h += data_table_html(t);
      }
    }
  }
  return h;
}

// ---- latency over context length ----

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

// Partition lines are drawn only from results.jsonl: the legend names those drawn on the page.
std::string latency_legend(const Palette& pal, const ReportModel& a, const ReportModel* b) {
  std::string h = "<ul class=\"legend\">" + legend_item(swatch_line("s-v1"), "best v1") +
                  legend_item(swatch_line("s-v2"), "best v2 (any partition)");
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
    h += legend_item(swatch_line("s-" + pal.cls(p)), "v2, partition " + std::to_string(p));
  }
  h += legend_item(swatch_box("band-v1", 0.3), "interquartile range");
  h += legend_item(swatch_box("v2zone", 0.25), "table chooses v2");
  h += legend_item(swatch_svg("<circle cx=\"14\" cy=\"6\" r=\"5\" class=\"noise-ring\"/>"),
                   "v1 and v2 within noise");
  return h + "</ul>";
}

// ---- decision maps ----

const char* rule_name(const std::string& id) {
  for (const EngineRule& r : engine_rules()) {
    if (r.id == id) {
      return r.name.c_str();
    }
  }
  return "rule";
}

std::string decision_svg(const DecisionMap& dm, const Palette& pal) {
  const int ncols = int(dm.contexts.size());
  const int nrows = int(dm.batches.size());
  const double cw = std::clamp(600.0 / std::max(1, ncols), 52.0, 110.0);
  const double ch = 42;
  constexpr double L = 70, R = 12, T = 12, B = 44;
  const double W = L + cw * ncols + R;
  const double H = T + ch * nrows + B;
  Svg svg(W, H, "chart decision-map", "decision map, " + dm.title);
  const auto row_y = [&](int r) { return T + ch * (nrows - 1 - r); }; // smallest batch at bottom
  for (int r = 0; r < nrows; ++r) {
    const int b = dm.batches[std::size_t(r)];
    svg.text(L - 8, row_y(r) + ch / 2 + 4, "batch " + std::to_string(b), "lbl", "end");
    for (int ci = 0; ci < ncols; ++ci) {
      const int ctx = dm.contexts[std::size_t(ci)];
      const double x0 = L + cw * ci;
      const double y0 = row_y(r);
      auto it = dm.cells.find({b, ctx});
      if (it == dm.cells.end()) {
        svg.rect(x0, y0, cw, ch, "cellbox c-none");
        svg.text(x0 + cw / 2, y0 + ch / 2 + 4, "not measured", "tick", "middle");
        continue;
      }
      const DecisionCell& c = it->second;
      const std::string fam = c.v2 ? pal.cls(c.partition) : "v1";
      const double strength =
          c.within_noise || !c.both ? 0.15 : 0.22 + 0.53 * std::min(1.0, c.margin / 0.5);
      std::string tip =
          "batch " + std::to_string(b) + ", context " + std::to_string(ctx) + ": " + c.config;
      if (c.both) {
        tip += c.within_noise ? ", within noise of the other family"
                              : ", " + format_percent(c.margin) + " faster than the other family";
      }
      svg.begin_group(tip);
      svg.rect(x0, y0, cw, ch, "cellbox c-" + fam, "fill-opacity:" + coord(strength));
      const std::string what = c.v2 ? "v2·" + format_count(c.partition) : "v1";
      svg.text(x0 + cw / 2, y0 + 17, what, "cell-b", "middle");
      const std::string by = !c.both          ? "only family"
                             : c.within_noise ? "≈ noise"
                                              : format_percent(c.margin);
      svg.text(x0 + cw / 2, y0 + 33, by, "cell", "middle");
      svg.end_group();
    }
  }
  for (int ci = 0; ci < ncols; ++ci) {
    svg.text(L + cw * (ci + 0.5), T + ch * nrows + 16, format_count(dm.contexts[std::size_t(ci)]),
             "tick", "middle");
  }
  svg.text(L + cw * ncols / 2, H - 8, "context length (tokens)", "lbl", "middle");
  // The rules' switch lines, between the measured lengths where each rule's decision changes
  // (so every cell lies on one side of a line), each rule offset a little so that coinciding
  // lines stay visible; the exact switch lengths are listed under the map.
  const std::map<std::string, double> offset = {
      {"fitted_rule", 0.0}, {"vllm", -4.0}, {"seed_engine", 4.0}};
  for (const auto& [rule, cells] : dm.rule_v2) {
    const double off = offset.count(rule) ? offset.at(rule) : 0.0;
    std::vector<double> prev; // the previous row's switch, for the step connector
    for (int r = 0; r < nrows; ++r) {
      const int b = dm.batches[std::size_t(r)];
      std::vector<double> xs;
      for (int ci = 0; ci + 1 < ncols; ++ci) {
        const bool here = cells.at({b, dm.contexts[std::size_t(ci)]});
        const bool next = cells.at({b, dm.contexts[std::size_t(ci) + 1]});
        if (here != next) {
          const double sx = L + cw * (ci + 1) + off;
          xs.push_back(sx);
          svg.begin_group(std::string(rule_name(rule)) + " at batch " + std::to_string(b) + ": " +
                          (here ? "v2" : "v1") + " up to " +
                          std::to_string(dm.contexts[std::size_t(ci)]) + ", " +
                          (next ? "v2" : "v1") + " from " +
                          std::to_string(dm.contexts[std::size_t(ci) + 1]));
          svg.line(sx, row_y(r), sx, row_y(r) + ch, "r-" + rule);
          svg.end_group();
        }
      }
      if (xs.size() == 1 && prev.size() == 1 && std::fabs(xs[0] - prev[0]) > 0.5) {
        const double yb = row_y(r) + ch; // the boundary with the row below (the smaller batch)
        svg.line(prev[0], yb, xs[0], yb, "r-" + rule);
      }
      prev = xs;
    }
  }
  return svg.str();
}

std::string switch_words(const DecisionMap& dm, const std::string& rule) {
  const auto it = dm.switches.find(rule);
  if (it == dm.switches.end()) {
    return "";
  }
  std::string h;
  for (int b : dm.batches) {
    const auto r = it->second.find(b);
    std::string s = "batch " + std::to_string(b) + ": ";
    if (r == it->second.end() || r->second.empty()) {
      const auto first = dm.rule_v2.at(rule).find({b, dm.contexts.front()});
      s += std::string(first != dm.rule_v2.at(rule).end() && first->second ? "v2" : "v1") +
           " throughout";
    } else {
      std::string parts;
      for (const auto& sw : r->second) {
        parts += (parts.empty() ? "" : ", ") + std::string(sw.to_v2 ? "v2" : "v1") + " from " +
                 std::to_string(sw.context_len);
      }
      s += parts;
    }
    h += (h.empty() ? "" : "; ") + s;
  }
  return h;
}

std::string decision_legend(const Palette& pal) {
  std::string h = "<ul class=\"legend\">" + legend_item(swatch_box("c-v1"), "v1 wins");
  for (int p : pal.partitions) {
    h += legend_item(swatch_box("c-" + pal.cls(p)), "v2 wins, partition " + std::to_string(p));
  }
  h += legend_item(swatch_box("c-v1", 0.15), "pale: within noise");
  for (const EngineRule& r : engine_rules()) {
    if (r.picks_family()) {
      h += legend_item(swatch_line("r-" + r.id), r.name + " switches");
    }
  }
  return h + "</ul>";
}

// ---- regret ----

struct Stats {
  int n = 0;
  double mean = 0, p25 = 0, median = 0, p75 = 0, worst = 0;
  int beyond = 0;
};

Stats stats_of(const std::vector<RegretPoint>& pts, const std::string& set) {
  std::vector<double> v;
  Stats s;
  for (const auto& p : pts) {
    if (p.set == set) {
      v.push_back(p.slowdown);
      s.beyond += p.beyond_noise ? 1 : 0;
    }
  }
  s.n = int(v.size());
  if (v.empty()) {
    return s;
  }
  for (double x : v) {
    s.mean += x / double(v.size());
  }
  s.p25 = quantile(v, 0.25);
  s.median = quantile(v, 0.5);
  s.p75 = quantile(v, 0.75);
  s.worst = *std::max_element(v.begin(), v.end());
  return s;
}

std::string regret_svg(const RegretView& r, const std::string& set) {
  double worst = 0.0;
  for (const auto& [id, pts] : r.points) {
    for (const auto& p : pts) {
      if (p.set == set) {
        worst = std::max(worst, p.slowdown);
      }
    }
  }
  constexpr double W = 1180, L = 120, R = 250, T = 12, RowH = 46, B = 40;
  const double rows = double(engine_rules().size());
  const double H = T + RowH * rows + B;
  const std::vector<double> ticks = linear_ticks(0.0, std::max(worst, 0.01) * 100.0, 6);
  const LinearAxis x{0.0, ticks.back(), L, W - R};
  Svg svg(W, H, "chart regret",
          std::string("regret of each rule on the ") + (set == "sweep" ? "sweep" : "held-out") +
              " points");
  for (double t : ticks) {
    svg.line(x(t), T, x(t), T + RowH * rows, "grid");
    svg.text(x(t), T + RowH * rows + 16, format_sig(t) + "%", "tick", "middle");
  }
  svg.text((L + W - R) / 2, H - 6, "slowdown against the fastest configuration (%)", "lbl",
           "middle");
  int row = 0;
  for (const EngineRule& rule : engine_rules()) {
    const std::string& id = rule.id;
    const std::string& name = rule.name;
    const double y0 = T + RowH * row;
    const double yc = y0 + RowH / 2;
    svg.text(L - 10, yc + 4, name, "lbl", "end");
    const auto& pts = r.points.at(id);
    const Stats s = stats_of(pts, set);
    if (s.n == 0) {
      svg.text(L + 6, yc + 4, "no points", "tick");
      ++row;
      continue;
    }
    svg.rect(x(s.p25 * 100), yc - 11, std::max(1.5, x(s.p75 * 100) - x(s.p25 * 100)), 22, "box");
    svg.line(x(s.median * 100), yc - 11, x(s.median * 100), yc + 11, "med");
    int i = 0;
    for (const auto& p : pts) {
      if (p.set != set) {
        continue;
      }
      // Spread the dots over the row height in a fixed pattern so that equal values stay visible.
      const double jitter = double((i * 7) % 9 - 4) * 3.2;
      svg.begin_group(p.where + ": chose " + p.chose + ", " + format_percent(p.slowdown) +
                      " against " + p.best +
                      (p.beyond_noise ? " (beyond noise)" : " (within noise)"));
      svg.circle(x(p.slowdown * 100), yc + jitter, 3.2, p.beyond_noise ? "dot-out" : "dot-in");
      svg.end_group();
      ++i;
    }
    const double mx = x(s.mean * 100);
    svg.polygon({mx, yc - 16, mx + 5, yc - 11, mx, yc - 6, mx - 5, yc - 11}, "mean");
    svg.text(W - R + 10, yc - 3,
             "mean " + format_percent(s.mean) + " · worst " + format_percent(s.worst), "lbl");
    svg.text(W - R + 10, yc + 13,
             std::to_string(s.beyond) + " of " + std::to_string(s.n) + " beyond noise", "tick");
    ++row;
  }
  svg.rect(L, T, W - L - R, RowH * rows, "frame");
  return svg.str();
}

std::string worst_points_html(const RegretView& r, const std::string& set) {
  std::string h = "<ul class=\"plain\">";
  for (const EngineRule& rule : engine_rules()) {
    const std::string& id = rule.id;
    const std::string& name = rule.name;
    std::vector<const RegretPoint*> pts;
    for (const auto& p : r.points.at(id)) {
      if (p.set == set && p.slowdown > 5e-5) {
        pts.push_back(&p);
      }
    }
    std::stable_sort(pts.begin(), pts.end(), [](const RegretPoint* a, const RegretPoint* b) {
      return a->slowdown > b->slowdown;
    });
    h += "<li data-rule=\"" + esc(id) + "\"><strong>" + esc(name) + "</strong>: ";
    if (pts.empty()) {
      h += "picks the fastest configuration at every point";
    }
    for (std::size_t i = 0; i < std::min<std::size_t>(3, pts.size()); ++i) {
      const RegretPoint& p = *pts[i];
      h += std::string(i ? "; " : "") + "<span class=\"" + (p.beyond_noise ? "bad" : "num") +
           "\">" + esc(format_percent(p.slowdown)) + "</span> at " + esc(p.where) + " (chose " +
           esc(p.chose) + ", fastest " + esc(p.best) + ")";
    }
    h += "</li>";
  }
  return h + "</ul>";
}

std::string regret_legend() {
  return "<ul class=\"legend\">" +
         legend_item(swatch_svg("<circle cx=\"14\" cy=\"6\" r=\"4\" class=\"dot-out\"/>"),
                     "a point, slower beyond its measured noise") +
         legend_item(swatch_svg("<circle cx=\"14\" cy=\"6\" r=\"4\" class=\"dot-in\"/>"),
                     "a point within noise") +
         legend_item(swatch_svg("<rect x=\"4\" y=\"1\" width=\"20\" height=\"10\" class=\"box\"/>"
                                "<line x1=\"12\" y1=\"1\" x2=\"12\" y2=\"11\" class=\"med\"/>"),
                     "middle half, median") +
         legend_item(swatch_svg("<polygon points=\"14,1 19,6 14,11 9,6\" class=\"mean\"/>"),
                     "mean") +
         "</ul>";
}

// ---- prefill ----

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

// ---- sections ----

// One section's content for one model; keyed parts (a figure per shape) pair up by key.
struct Part {
  std::string key;
  std::string html;
};

std::string glance_html(const ReportModel& m) {
  std::string h = "<h3>Where v2 starts to win (the table's decision)</h3><ul class=\"plain\">";
  std::map<std::string, std::string> per_map;
  std::vector<std::string> order;
  for (const auto& c : m.latency) {
    std::string d;
    if (c.v2.empty()) {
      d = "v1 at every length";
    } else {
      for (const auto& [from, to] : c.v2) {
        d += (d.empty() ? "" : ", ") +
             (from <= 1 ? std::string("v2 from the shortest length")
                        : "v2 from " + format_count(from)) +
             (to ? " to " + format_count(to) : "");
      }
    }
    std::string title;
    for (const auto& dm : m.maps) {
      if (dm.shape_key == c.shape_key) {
        title = dm.title;
      }
    }
    if (!per_map.count(title)) {
      order.push_back(title);
    }
    per_map[title] +=
        (per_map[title].empty() ? "" : "; ") + ("batch " + std::to_string(c.batch)) + ": " + d;
  }
  for (const auto& t : order) {
    h += "<li><strong>" + esc(t) + "</strong> — " + esc(per_map[t]) + "</li>";
  }
  h += "</ul><h3>What each rule costs</h3><table class=\"data\"><thead><tr><th>rule</th>"
       "<th>sweep: mean</th><th>worst</th><th>beyond noise</th><th>held-out: mean</th>"
       "<th>worst</th></tr></thead><tbody>";
  for (const EngineRule& rule : engine_rules()) {
    const std::string& id = rule.id;
    const std::string& name = rule.name;
    const Stats s = stats_of(m.regret.points.at(id), "sweep");
    const Stats ho = stats_of(m.regret.points.at(id), "held_out");
    const auto cell = [](const Stats& st, double v) {
      return st.n ? esc(format_percent(v)) : std::string("-");
    };
    h += "<tr data-rule=\"" + esc(id) + "\"><td>" + esc(name) + "</td><td class=\"num\">" +
         cell(s, s.mean) + "</td><td class=\"num\">" + cell(s, s.worst) +
         "</td><td class=\"num\">" + std::to_string(s.beyond) + " of " + std::to_string(s.n) +
         "</td><td class=\"num\">" + cell(ho, ho.mean) + "</td><td class=\"num\">" +
         cell(ho, ho.worst) + "</td></tr>";
  }
  return h + "</tbody></table>";
}

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

std::vector<Part> latency_parts(const ReportModel& m, const Palette& pal) {
  std::vector<Part> out;
  for (const auto& c : m.latency) {
    out.push_back({c.shape_key + " b=" + std::to_string(c.batch),
                   "<figure class=\"card\"><h3>" + esc(c.title) + "</h3>" + latency_svg(c, pal) +
                       "</figure>"});
  }
  return out;
}

std::vector<Part> map_parts(const ReportModel& m, const Palette& pal) {
  std::vector<Part> out;
  for (const auto& dm : m.maps) {
    std::string h = "<figure class=\"card\" data-shape=\"" + esc(dm.shape_key) + "\"><h3>" +
                    esc(dm.title) + "</h3>" + decision_svg(dm, pal) + "<ul class=\"plain\">";
    for (const EngineRule& r : engine_rules()) {
      if (dm.switches.count(r.id)) {
        h += "<li>" + esc(r.name) + ": " + esc(switch_words(dm, r.id)) + "</li>";
      }
    }
    out.push_back({dm.shape_key, h + "</ul></figure>"});
  }
  return out;
}

std::string regret_html(const ReportModel& m) {
  std::string h;
  for (const char* set : {"sweep", "held_out"}) {
    h += std::string("<figure class=\"card\" data-set=\"") + set + "\"><h3>" +
         (std::string(set) == "sweep" ? "On the sweep's points" : "On the held-out points") +
         "</h3>" + regret_svg(m.regret, set) + "<p>Worst points:</p>" +
         worst_points_html(m.regret, set) + "</figure>";
  }
  if (!m.regret.exact) {
    h += "<p class=\"caption\">Without results.jsonl each point knows only its best v1 and best "
         "v2 configuration, so a rule that picks another v2 partition is charged the best v2's "
         "time: these slowdowns are lower bounds. The table's own summary (from all "
         "measurements) is in the numbers below (table_mean_pct, table_worst_pct).</p>";
  }
  return h + tables_html(m, {"regret_summary", "regret"});
}

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

std::string section(const std::string& id, const std::string& title, const std::string& caption,
                    const std::string& body) {
  return "<section id=\"" + id + "\"><h2>" + esc(title) + "</h2><p class=\"caption\">" +
         esc(caption) + "</p>" + body + "</section>";
}

// Keyed parts of two models side by side, matched by key (first model's order, then the rest).
std::string paired(const std::vector<Part>& a, const std::vector<Part>& b) {
  std::vector<std::string> keys;
  for (const auto* list : {&a, &b}) {
    for (const auto& p : *list) {
      if (std::find(keys.begin(), keys.end(), p.key) == keys.end()) {
        keys.push_back(p.key);
      }
    }
  }
  const auto find = [](const std::vector<Part>& l, const std::string& k) -> std::string {
    for (const auto& p : l) {
      if (p.key == k) {
        return p.html;
      }
    }
    return "<p class=\"missing\">not in this table</p>";
  };
  std::string h;
  for (const auto& k : keys) {
    h += "<div class=\"pair\"><div>" + find(a, k) + "</div><div>" + find(b, k) + "</div></div>";
  }
  return h;
}

std::string side_by_side(const std::string& a, const std::string& b) {
  return "<div class=\"pair\"><div>" + a + "</div><div>" + b + "</div></div>";
}

std::string heads(const ReportModel& a, const ReportModel& b) {
  return side_by_side("<p class=\"side\">A: " + esc(a.label) + " — " + esc(a.device) + "</p>",
                      "<p class=\"side\">B: " + esc(b.label) + " — " + esc(b.device) + "</p>");
}

std::string joined(const std::vector<Part>& parts) {
  std::string h = "<div class=\"grid2\">";
  for (const auto& p : parts) {
    h += p.html;
  }
  return h + "</div>";
}

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

// The input, profile, timing mode, date and tool of a model, for the page's header.
std::string source_line(const ReportModel& m) {
  std::string line = m.label;
  for (const char* key : {"profile", "timing mode", "date", "tool"}) {
    for (const auto& [k, v] : m.provenance) {
      if (k == key) {
        line += " · " + std::string(key == std::string("timing mode") ? "timing " : "") + v;
      }
    }
  }
  return esc(line);
}

} // namespace

std::string render_report_html(const ReportModel& a, const ReportModel* b,
                               const std::vector<DecisionDiff>* diffs,
                               const std::string& generator) {
  const Palette pal = palette_of(a, b);
  const bool two = b != nullptr;
  const std::string rate = a.cpu ? "GFLOP/s" : "TFLOP/s";
  std::string title = "attn-tune report: " + a.device;
  if (two) {
    title += " vs " + b->device;
  }
  std::string h = "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">"
                  "<head><meta charset=\"utf-8\"/><meta name=\"viewport\" content=\"width=device-"
                  "width, initial-scale=1\"/><meta name=\"generator\" content=\"" +
                  esc(generator) + "\"/><title>" + esc(title) + "</title><style>\n" + kReportCss +
                  "</style></head><body>";
  h += "<header><h1>" + esc(title) + "</h1><p class=\"sub\">" +
       (two ? "A: " + source_line(a) + "<br/>B: " + source_line(*b) : source_line(a)) +
       "</p></header>";
  h += "<nav><a href=\"#glance\">At a glance</a><a href=\"#decision\">Decision maps</a><a "
       "href=\"#latency\">Decode latency</a><a href=\"#regret\">Regret</a><a "
       "href=\"#prefill\">Prefill</a><a href=\"#provenance\">Provenance</a>" +
       std::string(two ? "<a href=\"#diff\">Decisions that differ</a>" : "") + "</nav>";

  const auto both = [&](const std::string& x, const std::string& y) {
    return two ? heads(a, *b) + side_by_side(x, y) : x;
  };
  // Wide figures go one above the other, each under its table's name.
  const auto stacked = [&](const std::string& x, const std::string& y) {
    return two ? "<p class=\"side\">A: " + esc(a.label) + " — " + esc(a.device) + "</p>" + x +
                     "<p class=\"side\">B: " + esc(b->label) + " — " + esc(b->device) + "</p>" + y
               : x;
  };
  h += section("glance", "At a glance",
               "Read the first list for the context length where the table switches to v2 per "
               "shape and batch, the second for how much slower than the measured best each rule "
               "is on average and at worst.",
               both(glance_html(a), two ? glance_html(*b) : ""));
  h += section(
      "decision", "Decision maps",
      "Each cell is a measured (batch, context length) of one shape: its colour is the winning "
      "family (blue v1, warm colours v2 by partition), its strength and label how much faster "
      "than the other family it is; the lines mark where each rule switches between v1 and v2, "
      "so a cell on the wrong side of a rule's line is a call that rule gets wrong.",
      decision_legend(pal) +
          (two ? heads(a, *b) + paired(map_parts(a, pal), map_parts(*b, pal))
               : joined(map_parts(a, pal))) +
          (two ? side_by_side(tables_html(a, {"decision_map", "rule_switches"}),
                              tables_html(*b, {"decision_map", "rule_switches"}))
               : tables_html(a, {"decision_map", "rule_switches"})));
  h += section(
      "latency", "Decode latency over context length",
      "Each chart is one decode point (a shape at one batch size): the latency of the fastest "
      "v1 and v2 configuration as the context grows, both axes logarithmic, with the "
      "interquartile range as a band; the shaded region and dashed line show where the table "
      "uses v2, and dotted rings mark lengths where v1 and v2 are within noise of each other.",
      latency_legend(pal, a, b) +
          (two ? heads(a, *b) + paired(latency_parts(a, pal), latency_parts(*b, pal))
               : joined(latency_parts(a, pal))) +
          (two ? side_by_side(tables_html(a, {"decode_latency"}),
                              tables_html(*b, {"decode_latency"}))
               : tables_html(a, {"decode_latency"})));
  h += section("regret", "Regret of each rule",
               "How much slower each rule's choice is than the fastest measured configuration, "
               "one dot per decode point (red: slower beyond that point's measured noise); the "
               "box spans the middle half with the median, the diamond is the mean, and further "
               "right is costlier.",
               regret_legend() + stacked(regret_html(a), two ? regret_html(*b) : ""));
  h += section("prefill", "Prefill: achieved " + rate,
               "Achieved " + rate +
                   " (4 × head_dim × the query-key pairs the mask lets through, over the median "
                   "time) of each prefill configuration per shape, fastest first; the best is "
                   "highlighted and longer bars are better.",
               stacked(prefill_html(a), two ? prefill_html(*b) : ""));
  h += section("provenance", "Provenance and measurements",
               "Where and how these numbers were measured — a threshold holds only for this "
               "device, these kernels and this timing mode — and which configurations gave no "
               "time.",
               both(provenance_html(a), two ? provenance_html(*b) : ""));
  if (two && diffs != nullptr) {
    h += section("diff", "Decisions that differ",
                 "Every decode call measured in either table, looked up in both the way an "
                 "engine would: listed where the two tables choose different configurations, "
                 "calls that switch between v1 and v2 first.",
                 diff_html(*diffs));
  }
  h += "<footer><p class=\"sub\">Made by " + esc(generator) +
       " (attn-tune report). The page holds no scripts and loads nothing.</p></footer>";
  return h + "</body></html>\n";
}

std::string to_csv(const DataTable& t, const std::string& source) {
  const auto field = [](const std::string& v) {
    if (v.find_first_of(",\"\n\r") == std::string::npos) {
      return v;
    }
    std::string q(1, '"');
    for (char c : v) {
      q.push_back(c);
      if (c == '"') {
        q.push_back('"');
      }
    }
    q.push_back('"');
    return q;
  };
  std::string s = "table";
  for (const auto& c : t.columns) {
    s.push_back(',');
    s.append(field(c));
  }
  s.push_back('\n');
  for (const auto& r : t.rows) {
    s.append(field(source));
    for (const auto& v : r) {
      s.push_back(',');
      s.append(field(v));
    }
    s.push_back('\n');
  }
  return s;
}

std::vector<std::string> write_report_csv(const std::string& folder, const ReportModel& a,
                                          const ReportModel* b,
                                          const std::vector<DecisionDiff>* diffs) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) {
    throw InputError("cannot create folder '" + folder + "': " + ec.message());
  }
  std::vector<std::string> written;
  const std::vector<DataTable> ta = model_tables(a);
  const std::vector<DataTable> tb = b ? model_tables(*b) : std::vector<DataTable>{};
  for (std::size_t i = 0; i < ta.size(); ++i) {
    std::string text = to_csv(ta[i], a.label);
    if (b != nullptr) {
      const std::string more = to_csv(tb[i], b->label);
      text += more.substr(more.find('\n') + 1); // rows only: one header per file
    }
    const std::string path = (std::filesystem::path(folder) / (ta[i].id + ".csv")).string();
    write_file_atomically(path, text);
    written.push_back(path);
  }
  if (b != nullptr && diffs != nullptr) {
    const std::string path = (std::filesystem::path(folder) / "decision_diff.csv").string();
    write_file_atomically(path, to_csv(diff_table(*diffs), a.label + " vs " + b->label));
    written.push_back(path);
  }
  return written;
}

} // namespace attn::report
