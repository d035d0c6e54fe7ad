// The page's first section: where the table switches to v2 per shape and batch, how many of its
// decisions rest on timings within noise, and what each rule costs on average and at worst.
#include <map>

#include "src/report/page_views.h"
#include "src/report/svg_plot.h"
#include "src/tuning/sweep.h" // kRemeasureFactor

namespace attn::report {

namespace {

// How many of the table's decisions rest on timings within noise, the ones that could move a
// switch named, and the remedy; nothing for tables made before they were listed.
std::string noisy_glance(const ReportModel& m) {
  if (!m.noisy_listed) {
    return "";
  }
  std::string h = "<h3>Decisions resting on timings within noise</h3><p class=\"noisy\">";
  if (m.noisy.empty()) {
    return h + "None: no switch between v1 and v2 borders or hides in timings within noise "
               "(ties elsewhere cost less than the noise either way).</p>";
  }
  std::string switches;
  for (const NoisyMark& k : m.noisy) {
    if (k.switch_at) {
      switches += "<li>" + esc(k.where + ": " + noisy_words(k)) + "</li>";
    }
  }
  const std::size_t n = m.noisy.size();
  h += "<strong>" + std::to_string(n) + (n == 1 ? " decision rests" : " decisions rest") +
       "</strong> on timings within noise (dashed frames on the decision maps, listed under "
       "each): re-measuring could flip " +
       (n == 1 ? "it" : "them") + ". <code>attn-tune sweep --resume --remeasure-noisy</code> " +
       "re-times them with " + std::to_string(kRemeasureFactor) +
       "x the repetitions; a quieter machine is the other remedy.</p>";
  if (!switches.empty()) {
    h += "<p>Those next to a switch between v1 and v2, which could move:</p><ul class=\"plain "
         "noisy\">" +
         switches + "</ul>";
  }
  return h;
}

} // namespace

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
  h += "</ul>" + noisy_glance(m) +
       "<h3>What each rule costs</h3><table class=\"data\"><thead><tr><th>rule</th>"
       "<th>sweep: mean</th><th>worst</th><th>beyond noise</th><th>held-out: mean</th>"
       "<th>worst</th></tr></thead><tbody>";
  for (const EngineRule* rule : rules_listed(m.own_rule)) {
    const std::string& id = rule->id;
    const std::string name = rule_label(*rule, m.own_rule);
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

} // namespace attn::report
