// The decision maps: per shape, the measured winner at each (batch, context length) coloured by
// family and partition, with the switch line of each rule that picks v1 or v2.
#include <algorithm>
#include <cmath>
#include <map>

#include "src/report/page_views.h"
#include "src/report/svg_plot.h"

namespace attn::report {

namespace {

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
      if (c.noisy_decision) {
        tip += "; the table's decision here rests on timings within noise";
      }
      svg.begin_group(tip);
      svg.rect(x0, y0, cw, ch, "cellbox c-" + fam, "fill-opacity:" + coord(strength));
      if (c.noisy_decision) {
        svg.rect(x0 + 4, y0 + 4, cw - 8, ch - 8, "noisy-cell");
      }
      // A kernel that chooses its splits has no partition to print: the legend says so.
      const std::string what = !c.v2                          ? "v1"
                               : c.partition == kKernelSplits ? "v2"
                                                              : "v2·" + format_count(c.partition);
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
      {"fitted_rule", 0.0}, {"vllm_cuda", -4.0}, {"vllm_cpu", -8.0}, {"seed_engine", 4.0}};
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

// The map's decisions that rest on timings within noise, in words, as one list item.
std::string noisy_item(const ReportModel& m, const std::string& shape_key) {
  std::string list;
  int n = 0;
  for (const NoisyMark& k : m.noisy) {
    if (k.shape_key != shape_key) {
      continue;
    }
    ++n;
    list += "<li>batch " + std::to_string(k.batch) + " ctx " + std::to_string(k.context_len) +
            ": " + esc(noisy_words(k)) + "</li>";
  }
  if (n == 0) {
    return "";
  }
  return "<li class=\"noisy\">" + std::to_string(n) + " decision" + (n == 1 ? " rests" : "s rest") +
         " on timings within noise (dashed frames):<ul>" + list + "</ul></li>";
}

} // namespace

std::string noisy_words(const NoisyMark& k) {
  std::string w = k.decision;
  w += k.carried_from ? " carried from " + std::to_string(k.carried_from)
                      : std::string(" by default");
  w += (k.decision == k.faster ? "; " : ", though ") + k.faster + "'s median is " +
       format_sig(k.margin * 100, 2) + "% faster (within the noise of " +
       format_sig(k.noise * 100, 2) + "%)";
  if (k.switch_at) {
    w += "; the switch to " + std::string(k.decision == "v1" ? "v2" : "v1") + " before " +
         std::to_string(k.switch_at) + " could lie this early";
  }
  if (k.remeasured) {
    w += "; still within noise after re-timing";
  }
  return w;
}

std::string decision_legend(const Palette& pal, bool noisy) {
  std::string h = "<ul class=\"legend\">" + legend_item(swatch_box("c-v1"), "v1 wins");
  for (int p : pal.partitions) {
    h += legend_item(swatch_box("c-" + pal.cls(p)), "v2 wins, " + partition_words(p));
  }
  h += legend_item(swatch_box("c-v1", 0.15), "pale: within noise");
  if (noisy) {
    h += legend_item(swatch_svg("<rect x=\"4\" y=\"1\" width=\"20\" height=\"10\" "
                                "class=\"noisy-cell\"/>"),
                     "dashed frame: the table's decision rests on timings within noise");
  }
  for (const EngineRule& r : engine_rules()) {
    if (r.picks_family()) {
      h += legend_item(swatch_line("r-" + r.id), r.name + " switches");
    }
  }
  return h + "</ul>";
}

std::vector<Part> map_parts(const ReportModel& m, const Palette& pal) {
  std::vector<Part> out;
  for (const auto& dm : m.maps) {
    std::string h = "<figure class=\"card\" data-shape=\"" + esc(dm.shape_key) + "\"><h3>" +
                    esc(dm.title) + "</h3>";
    if (dm.too_large) {
      h += "<p>Not drawn: " + std::to_string(dm.batches.size()) + " batches x " +
           std::to_string(dm.contexts.size()) + " context lengths is more than the " +
           std::to_string(kMaxMapCells) + " cells a map draws; report --format csv lists every "
           "measured cell (decision_map.csv).</p>";
    } else {
      h += decision_svg(dm, pal);
    }
    h += "<ul class=\"plain\">";
    for (const EngineRule* r : rules_listed(m.own_rule)) {
      if (dm.switches.count(r->id)) {
        h += "<li>" + esc(rule_label(*r, m.own_rule)) + ": " + esc(switch_words(dm, r->id)) +
             "</li>";
      }
    }
    h += noisy_item(m, dm.shape_key);
    out.push_back({dm.shape_key, h + "</ul></figure>"});
  }
  return out;
}

} // namespace attn::report
