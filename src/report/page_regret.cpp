// The regret view: each rule's slowdown against the fastest configuration, one dot per decode
// point with a box of the middle half, and the worst points in words.
#include <algorithm>
#include <cstdio>

#include "include/attn_tune/threshold_table_reader.hpp"
#include "src/report/page_views.h"
#include "src/tuning/regret.h"
#include "src/report/svg_plot.h"

namespace attn::report {

namespace {

std::string regret_svg(const RegretView& r, const EngineRule* own, const std::string& set) {
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
  for (const EngineRule* rule : rules_listed(own)) {
    const std::string& id = rule->id;
    const double y0 = T + RowH * row;
    const double yc = y0 + RowH / 2;
    svg.text(L - 10, yc + (rule == own ? -2 : 4), rule->name, "lbl", "end");
    if (rule == own) { // the rule tuning replaces: the row that says what the table gained
      svg.text(L - 10, yc + 12, "kernel set's own", "tick", "end");
    }
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

std::string worst_points_html(const RegretView& r, const EngineRule* own, const std::string& set) {
  std::string h = "<ul class=\"plain\">";
  for (const EngineRule* rule : rules_listed(own)) {
    const std::string& id = rule->id;
    const std::string name = rule_label(*rule, own);
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

} // namespace

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

std::string regret_html(const ReportModel& m) {
  std::string h;
  for (const char* set : {"sweep", "held_out"}) {
    h += std::string("<figure class=\"card\" data-set=\"") + set + "\"><h3>" +
         (std::string(set) == "sweep" ? "On the sweep's points" : "On the held-out points") +
         "</h3>" + regret_svg(m.regret, m.own_rule, set) + "<p>Worst points:</p>" +
         worst_points_html(m.regret, m.own_rule, set) + "</figure>";
  }
  if (!m.regret.exact) {
    h += "<p class=\"caption\">Without results.jsonl each point knows only its best v1 and best "
         "v2 configuration, so a rule that picks another v2 partition is charged the best v2's "
         "time: these slowdowns are lower bounds. The table's own summary (from all "
         "measurements) is in the numbers below (table_mean_pct, table_worst_pct).</p>";
  }
  return h + tables_html(m, {"regret_summary", "regret"});
}

std::string traffic_html(const ReportModel& m) {
  const TrafficView& v = m.traffic;
  if (!v.present) {
    return "<p class=\"caption\">No batches of mixed lengths in this table.</p>";
  }
  std::string h = "<figure class=\"card\"><table class=\"data\"><thead><tr><th>rule</th>";
  for (const char* set : {"sweep batches", "held-out batches"}) {
    h += std::string("<th>") + set + ": regret</th><th>mean / p90 / worst</th>";
  }
  h += "</tr></thead><tbody>";
  for (const TrafficRule& r : v.rules) {
    h += "<tr data-rule=\"" + esc(r.id) + "\"><td>" + esc(r.label) + "</td>";
    for (const char* set : {"sweep", "held_out"}) {
      const nlohmann::json& t = v.totals.at(set);
      if (!t.contains(r.id) || t.at(r.id).at("batches").get<int>() == 0) {
        h += "<td>-</td><td>-</td>";
        continue;
      }
      const nlohmann::json& x = t.at(r.id);
      h += "<td class=\"num\">" + esc(format_percent(x.at("regret").get<double>())) +
           "</td><td class=\"num\">" + esc(format_percent(x.at("mean").get<double>())) + " / " +
           esc(format_percent(x.at("p90").get<double>())) + " / " +
           esc(format_percent(x.at("worst").get<double>())) + " (" +
           std::to_string(x.at("batches").get<int>()) + ")</td>";
    }
    h += "</tr>";
  }
  h += "</tbody></table></figure>";

  // The batches, most uneven first, with each rule's slowdown there.
  h += "<figure class=\"card\"><table class=\"data\"><thead><tr><th>sequences</th>"
       "<th>longest</th><th>mean</th><th>count</th><th>fastest</th>";
  for (const TrafficRule& r : v.rules) {
    h += "<th>" + esc(r.label) + "</th>";
  }
  h += "</tr></thead><tbody>";
  for (const TrafficBatch& b : v.batches) {
    char mean[32];
    std::snprintf(mean, sizeof mean, "%.0f", b.mean_len);
    h += std::string("<tr") + (b.held_out ? " class=\"held\"" : "") + "><td>" +
         std::to_string(b.sequences) + (b.held_out ? " (held out)" : "") + "</td><td>" +
         std::to_string(b.max_len) + "</td><td>" + mean + "</td><td>" +
         esc(format_sig(b.weight)) + "</td><td>" + esc(b.fastest) + "</td>";
    for (const double s : b.slowdown) {
      h += s < 0 ? "<td>-</td>"
                 : std::string("<td class=\"") + (s > 0.05 ? "bad" : "num") + "\">" +
                       esc(format_percent(s)) + "</td>";
    }
    h += "</tr>";
  }
  h += v.exact ? "</tbody></table><p class=\"caption\">Per batch, each rule's choice is charged "
                 "its own time from results.jsonl; the totals above are the table's, from the "
                 "same measurements.</p></figure>"
               : "</tbody></table><p class=\"caption\">Per batch, a rule that picks another "
                 "configuration of a family is charged that family's best time (the table keeps "
                 "no other), so these slowdowns are lower bounds; the totals above are the "
                 "table's, from all measurements.</p></figure>";
  return h + tables_html(m, {"traffic_regret", "traffic_batches"});
}

} // namespace attn::report
