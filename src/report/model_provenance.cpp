// The provenance view's numbers: where, how and with what the table was measured, and the
// configurations that gave no time (failed, fault, error, skipped), from results.jsonl.
#include <map>
#include <string>

#include "src/report/model_views.h"
#include "src/report/svg_plot.h"
#include "src/tuning/provenance.h"
#include "src/tuning/results_file.h"

namespace attn::report {

using nlohmann::json;

void add_provenance(ReportModel& m, const ReportSource& src) {
  const json& pv = src.table.at("provenance");
  auto& out = m.provenance;
  const json dev = pv.value("device", json::object());
  m.cpu = dev.value("backend", "") == "cpu";
  m.device = dev.value("name", "unknown device") + " (" + dev.value("id", "?") + ")";
  std::string dev_words = m.device;
  if (dev.contains("threads")) {
    dev_words += ", " + std::to_string(dev["threads"].get<int>()) + " threads";
  }
  if (dev.contains("sm_count")) {
    dev_words += ", " + std::to_string(dev["sm_count"].get<int>()) + " SMs";
  }
  if (dev.contains("memory_bytes")) {
    dev_words += ", " + format_sig(dev["memory_bytes"].get<double>() / double(1 << 30)) + " GiB";
  }
  out.emplace_back("device", dev_words);
  out.emplace_back("kernels", pv.contains("kernels") ? kernels_label(pv["kernels"])
                                                     : "the built-in attn-tune kernels");
  m.own_rule = own_engine_rule(src.table);
  const json k = pv.value("kernels", json::object());
  if (m.own_rule != nullptr) {
    out.emplace_back("engine rule replaced",
                     m.own_rule->name + " (" + m.own_rule->declared + "): " + m.own_rule->summary);
  } else if (k.is_object() && k.contains("engine_rule")) {
    const std::string named = k.value("engine_rule", "");
    out.emplace_back("engine rule replaced",
                     named.empty() ? "none named" : named + " (not a rule this attn-tune knows)");
  }
  if (pv.contains("kernel_sources_sha256")) {
    out.emplace_back("kernel sources sha256", pv["kernel_sources_sha256"].get<std::string>());
  }
  const json tool = pv.value("tool", json::object());
  out.emplace_back("tool", tool.value("name", "attn-tune") + " " + tool.value("version", "?") +
                               " (" + tool.value("git_hash", "?") + ")");
  const json prof = pv.value("profile", json::object());
  out.emplace_back("profile", prof.value("name", "?") + " (hash " + prof.value("hash", "?") + ")");
  out.emplace_back("search", search_words(src.table));
  for (const std::string& line : inferred_decision_lines(src.table)) {
    out.emplace_back("inferred decision", line);
  }
  out.emplace_back("timing mode", pv.value("timing_mode", "events"));
  out.emplace_back("timing method", pv.value("timing_method", "?"));
  if (pv.contains("timing_options")) {
    out.emplace_back("timing options", pv["timing_options"].dump());
  }
  if (pv.contains("clocks") && !pv["clocks"].is_null()) {
    out.emplace_back("clocks", pv["clocks"].dump());
  }
  out.emplace_back("date", pv.value("created_utc", "?"));
  if (pv.contains("seed")) {
    out.emplace_back("seed", pv["seed"].dump());
  }
  out.emplace_back("table", src.table_path + " (schema version " +
                                std::to_string(src.table.at("version").get<int>()) + ")");
  out.emplace_back("results", src.results_path.empty() ? "none: the views show what the table holds"
                                                       : src.results_path);
}

void add_issues(ReportModel& m, const ReportSource& src) {
  // The last line of each (workload, configuration) counts, as in the table.
  std::map<std::string, const json*> last;
  std::vector<std::string> order;
  for (const auto& l : src.lines) {
    const std::string k = l.value("workload_key", "") + " | " + l.value("config_key", "");
    if (last.emplace(k, &l).second) {
      order.push_back(k);
    } else {
      last[k] = &l;
    }
  }
  for (const auto& k : order) {
    const json& l = *last[k];
    const std::string status = l.value("status", "");
    if (status == "skipped") {
      ++m.skipped[l.value("reason", "no reason given")];
    } else if (status == "failed" || status == "fault" || status == "error") {
      m.issues.push_back({l.value("workload_key", "?"), l.value("config_key", "?"), status,
                          l.value("reason", "")});
    }
  }
}

} // namespace attn::report
