// The report page: sections in reading order (at a glance, provenance, decision maps, decode
// latency, regret, prefill, decisions that differ), each figure an inline SVG whose colours come
// from the page's style sheet so that light, dark and print modes each pick readable ones.
#include "src/report/report_html.h"

#include <algorithm>

#include "src/report/page_views.h"

namespace attn::report {

namespace {

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
      "so a cell on the wrong side of a rule's line is a call that rule gets wrong. A dashed "
      "frame marks a cell where the table's own decision rests on timings within noise.",
      decision_legend(pal, a.noisy_listed || (two && b->noisy_listed)) +
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
  if (a.traffic.present || (two && b->traffic.present)) {
    h += section("traffic", "Regret over the traffic: batches of mixed lengths",
                 "What each rule's choices cost over the measured batches, each weighted by how "
                 "often it occurred, against the fastest configuration per batch (regret = total "
                 "time / best total - 1), on the batches the fit saw and on held-out ones; then "
                 "the batches, most uneven first (longest / mean length), with each rule's "
                 "slowdown there.",
                 stacked(traffic_html(a), two ? traffic_html(*b) : ""));
  }
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

} // namespace attn::report
