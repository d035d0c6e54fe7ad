// Presentation of a threshold table for `table show`: times in microseconds, regret in percent;
// the table itself stays the machine-readable record.
#include "src/cli/table_text.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "src/backends/plugin/plugin_declaration.h"
#include "src/tuning/provenance.h"
#include "src/tuning/regret.h"
#include "src/tuning/sweep.h" // kRemeasureFactor

namespace attn::cli {

using nlohmann::json;

namespace {

std::string fmt_us(const json& t) {
  if (t.is_null()) {
    return "-";
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", t.at("median_s").get<double>() * 1e6);
  return buf;
}

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", x * 100.0);
  return buf;
}

// Which engine rule the kernels replace: the row of the regret that says what tuning gained.
std::string engine_rule_line(const json& t) {
  const json& pv = t.at("provenance");
  const json declared = pv.contains("kernels") && pv["kernels"].is_object()
                            ? pv["kernels"].value("engine_rule", json())
                            : json();
  if (!declared.is_string()) {
    return ""; // made before kernel sets named their rule
  }
  const std::string name = declared.get<std::string>();
  if (name.empty()) {
    return "engine:   the kernels name no engine rule they replace\n";
  }
  const EngineRule* r = engine_rule_declared(name);
  if (r == nullptr) {
    return "engine:   the kernels replace engine rule \"" + name +
           "\", which this attn-tune does not know\n";
  }
  return "engine:   the kernels replace " + r->name + "'s rule (" + name + ": " + r->summary +
         "), the kernel set's own rule in the regret below\n";
}

// The string entries of provenance.kernels.source_files (tables since 2026-12-07); nullopt where
// the kernels list none.
std::optional<std::vector<std::string>> source_file_names(const json& k) {
  if (!k.is_object() || !k.contains("source_files") || !k["source_files"].is_array()) {
    return std::nullopt;
  }
  std::vector<std::string> names;
  for (const json& f : k["source_files"]) {
    if (f.is_string()) {
      names.push_back(f.get<std::string>());
    }
  }
  return names;
}

// " (sources sha256 ABCD over 31 files in kernels/, src/backends/cpu/, src/backends/cuda/)" for
// built-in kernels whose provenance lists the files hashed, else "".
std::string builtin_sources_words(const json& pv) {
  const json k = pv.value("kernels", json::object());
  const auto names = source_file_names(k);
  if (!names || names->size() != k["source_files"].size()) {
    return "";
  }
  std::vector<std::string> folders;
  for (const std::string& path : *names) {
    const std::string folder = path.substr(0, path.rfind('/') + 1);
    if (std::find(folders.begin(), folders.end(), folder) == folders.end()) {
      folders.push_back(folder);
    }
  }
  std::string in;
  for (const auto& f : folders) {
    in += (in.empty() ? "" : ", ") + (f.empty() ? std::string("./") : f);
  }
  return " (sources sha256 " + pv.value("kernel_sources_sha256", "?").substr(0, 16) + " over " +
         std::to_string(names->size()) + " files in " + in + ")";
}

// " over 2 files: helper.py, main.py" for Python kernels whose provenance names the files their
// sources sha256 is over, else "".
std::string python_sources_words(const json& k) {
  const auto names = source_file_names(k);
  if (!names) {
    return "";
  }
  const json count = k.value("source_file_count", json(names->size()));
  return " over " +
         source_files_words(
             *names, count.is_number_unsigned() ? count.get<std::size_t>() : names->size(), 8);
}

// Where, when and with what the table was measured, and how many measurements it rests on.
void describe_provenance(std::ostringstream& s, const json& t) {
  const json& pv = t.at("provenance");
  const json& dev = pv.at("device");
  s << "attn-tune threshold table (schema " << t.at("schema").get<std::string>() << " v"
    << t.at("version").get<int>() << ")\n";
  s << "device:   " << dev.value("name", "?") << " (" << dev.value("id", "?") << ")";
  if (dev.contains("sm_count")) {
    s << ", " << dev["sm_count"].get<int>() << " SMs, cc " << dev.value("compute_capability", "?");
  } else if (dev.contains("threads")) {
    s << ", " << dev["threads"].get<int>() << " threads";
  }
  s << "\n";
  s << "profile:  " << pv.at("profile").value("name", "?") << " (hash "
    << pv.at("profile").value("hash", "?") << ")\n";
  s << "search:   " << search_words(t) << "\n";
  s << "tool:     attn-tune " << pv.at("tool").value("version", "?") << " ("
    << pv.at("tool").value("git_hash", "?") << "), kernels sha256 "
    << pv.value("kernel_sources_sha256", "?").substr(0, 16) << "\n";
  if (pv.contains("kernels") && pv["kernels"].value("source", "") == "plugin") {
    const json& k = pv["kernels"];
    if (k.value("bridge", "") == "python") {
      s << "kernels:  Python kernels " << k.value("name", "?") << " " << k.value("version", "")
        << " (python:" << k.value("module", "?") << ", sources sha256 "
        << k.value("library_sha256", "?").substr(0, 16) << python_sources_words(k) << ")\n";
    } else {
      s << "kernels:  plugin " << k.value("name", "?") << " " << k.value("version", "") << " ("
        << k.value("library", "?") << ", plugin ABI " << k.value("abi_version", 0) << ", sha256 "
        << k.value("library_sha256", "?").substr(0, 16) << ")\n";
    }
  } else {
    s << "kernels:  built-in attn-tune kernels" << builtin_sources_words(pv) << "\n";
  }
  s << engine_rule_line(t);
  s << "made:     " << pv.value("created_utc", "?")
    << ", timing: " << pv.value("timing_method", "?") << "\n";
  const json& c = t.at("measurement_counts");
  s << "measured: " << c.value("ok", 0) << " timed, " << c.value("failed", 0)
    << " failed validation, " << c.value("skipped", 0) << " skipped (cannot run), "
    << c.value("error", 0) << " errors";
  if (c.value("fault", 0) > 0) { // tables of version 1 made before faults existed have no count
    s << ", " << c.value("fault", 0) << " faults (crashed or hung)";
  }
  s << "\n";
  // One shard's table, or a merge of shards (attn-tune merge); one merged with --partial says
  // here, not only in its JSON, that its decisions rest on part of the sweep.
  if (pv.contains("shard")) {
    s << "shard:    " << pv["shard"].value("index", 0) << "/" << pv["shard"].value("count", 1)
      << " of a sharded sweep: this table covers that shard's points only (attn-tune merge "
         "combines the shards)\n";
  }
  if (pv.contains("merge")) {
    const json& m = pv["merge"];
    const std::size_t shards = m.value("shards", json::array()).size();
    s << "merged:   " << shards << " shard folder" << (shards == 1 ? "" : "s") << " of "
      << m.value("shard_count", 0) << " shards";
    if (m.value("complete", true)) {
      s << ", complete\n";
    } else {
      s << "\nINCOMPLETE: merged with --partial; its decisions rest on part of the sweep:";
      for (const json& i : m.value("missing_shards", json::array())) {
        s << " shard " << i.get<int>() << "/" << m.value("shard_count", 0) << " has no folder;";
      }
      for (const json& f : m.value("shards", json::array())) {
        if (!f.value("complete", true)) {
          s << " shard " << f.value("shard", "?") << " has " << f.value("measurements", 0) << " of "
            << f.value("expected", 0) << " measurements;";
        }
      }
      s << "\n";
    }
  }
  s << "\n";
}

void describe_rule(std::ostringstream& s, const json& rule) {
  if (rule.value("points", 0) == 0) {
    // Nothing to fit: its k and partition are the fit's starting values, not a decision.
    s << "fitted rule: none (no decode point of the sweep timed both v1 and v2)\n\n";
    return;
  }
  char kbuf[64];
  std::snprintf(kbuf, sizeof kbuf, "%.4g", rule.at("k").get<double>());
  const json& part = rule.at("partition");
  s << "fitted rule: use v2 (" << partition_words(part.is_null() ? kKernelSplits : part.get<int>())
    << ") when " << rule.at("tiles").get<std::string>() << " > " << kbuf << " * sm_count (sm_count "
    << rule.at("sm_count").get<int>() << "; fitted on " << rule.at("points").get<int>()
    << " points)\n\n";
}

void describe_regret(std::ostringstream& s, const json& t) {
  const json& regret = t.at("regret");
  const EngineRule* own = own_engine_rule(t);
  s << "regret (slowdown vs the measured best; mean / worst over points):\n";
  for (const char* set : {"sweep", "held_out"}) {
    const json& r = regret.at(set);
    s << "  " << (std::string(set) == "sweep" ? "sweep points   " : "held-out points") << " ";
    // Every rule the table priced, the kernel set's own first of the engines' (a table older
    // than a rule lacks it; vLLM's CUDA rule was "vllm" before version 3).
    for (const EngineRule* rule : rules_listed(own)) {
      const json* x = stored_regret(r, *rule);
      if (x == nullptr) {
        continue;
      }
      s << " " << rule->id << (rule == own ? " (the kernel set's own rule)" : "") << " "
        << pct(x->at("mean").get<double>()) << "/" << pct(x->at("worst").get<double>());
    }
    s << "  (" << r.at("fitted_rule").at("points").get<int>() << " points";
    if (r.at("table_lookup").contains("beyond_noise")) {
      s << "; table lookup beyond the measured noise at "
        << r.at("table_lookup").at("beyond_noise").get<int>() << " of them";
    }
    s << ")\n";
  }
}

std::string point_words(const json& p); // below

// A batch rule's tree, one line per node, indented by depth.
void describe_tree(std::ostringstream& s, const json& n, const std::string& indent) {
  if (n.contains("feature")) {
    char tbuf[64];
    std::snprintf(tbuf, sizeof tbuf, "%.6g", n.at("threshold").get<double>());
    const std::string f = n.at("feature").get<std::string>();
    s << indent << f << " < " << tbuf << ":\n";
    describe_tree(s, n.at("below"), indent + "  ");
    s << indent << f << " >= " << tbuf << ":\n";
    describe_tree(s, n.at("at_or_above"), indent + "  ");
    return;
  }
  if (n.contains("lookup")) {
    s << indent << "the decode points (read with the batch's size and longest length)";
  } else {
    s << indent << n.at("family").get<std::string>() << " "
      << n.at("config").at("key").get<std::string>();
  }
  if (n.contains("batches")) {
    // A leaf counts the samples it was fitted on that reach it: batches and grid points alike.
    s << "  (" << n.at("batches").get<int>() << " batches and grid points, mean slowdown "
      << pct(n.value("mean_slowdown", 0.0)) << ")";
  }
  s << "\n";
}

// Version 4: the decisions for whole batches and what each rule costs over the traffic.
void describe_batches(std::ostringstream& s, const json& t) {
  if (!t.contains("batch_rules") || !t.contains("batches")) {
    return;
  }
  int held = 0;
  for (const json& b : t.at("batches")) {
    held += b.value("held_out", false) ? 1 : 0;
  }
  const int n = int(t.at("batches").size());
  s << "batches measured sequence by sequence: " << n << " (" << held << " held out)\n";
  for (const json& r : t.at("batch_rules")) {
    s << "batch rule " << point_words(r) << " (fitted on " << r.at("batches").get<int>()
      << " batches and " << r.value("points", 0) << " grid points):\n";
    describe_tree(s, r.at("tree"), "  ");
  }
  const json& regret = t.at("regret");
  if (!regret.contains("traffic")) {
    s << "\n";
    return;
  }
  const EngineRule* own = own_engine_rule(t);
  s << "traffic regret (total time of each rule's choices over the batches, each weighted by its "
       "count, against the best per batch; then mean / p90 / worst slowdown):\n";
  for (const char* set : {"sweep", "held_out"}) {
    const json& r = regret.at("traffic").at(set);
    s << "  " << (std::string(set) == "sweep" ? "sweep batches" : "held-out batches") << "\n";
    auto line = [&](const std::string& id, const std::string& label) {
      if (!r.contains(id)) {
        return;
      }
      const json& x = r.at(id);
      s << "    " << label << ": " << pct(x.at("regret").get<double>()) << "  ("
        << pct(x.at("mean").get<double>()) << " / " << pct(x.at("p90").get<double>()) << " / "
        << pct(x.at("worst").get<double>()) << " over " << x.at("batches").get<int>()
        << " batches)\n";
    };
    line("batch_rules", "batch rules (the table, whole batch)");
    for (const EngineRule* rule : rules_listed(own)) {
      const std::string label = rule->kind == RuleKind::table_lookup
                                    ? "table lookup (grid points, longest length)"
                                    : rule_label(*rule, own);
      line(rule->id, label);
    }
  }
  s << "\n";
}

// Version 1 has one threshold; version 2 keeps that form where it holds and otherwise reads
// as switches along context length: "v2 below ctx 4096, v1 from 4096".
std::string describe_decision(const json& p) {
  if (p.contains("v2_from")) {
    const json& f = p.at("v2_from");
    return "v2 " +
           (f.is_string() ? f.get<std::string>() : "from ctx " + std::to_string(f.get<int>()));
  }
  std::vector<std::pair<int, const char*>> switches; // (first context length, family)
  for (const auto& iv : p.at("v2_intervals")) {
    switches.emplace_back(iv.at(0).get<int>(), "v2");
    if (!iv.at(1).is_null()) {
      switches.emplace_back(iv.at(1).get<int>(), "v1");
    }
  }
  if (switches.empty() || switches.front().first > 1) {
    switches.insert(switches.begin(), {1, "v1"});
  }
  std::string out;
  for (std::size_t i = 0; i < switches.size(); ++i) {
    if (i == 0) {
      out = std::string(switches[0].second) +
            (switches.size() > 1 ? " below ctx " + std::to_string(switches[1].first) : " always");
    } else {
      out += ", " + std::string(switches[i].second) + " from " + std::to_string(switches[i].first);
    }
  }
  return out;
}

// Version 2's noise call for one measured length: the winner's margin against the noise.
std::string describe_noise(const json& m) {
  if (!m.contains("margin") || !m.contains("noise")) {
    return "";
  }
  const std::string margin = pct(m.at("margin").get<double>());
  const std::string noise = pct(m.at("noise").get<double>());
  if (m.value("within_noise", false)) {
    return "; within noise (" + margin + " <= " + noise + ")";
  }
  const bool v2 = m.at("v2").at("median_s").get<double>() < m.at("v1").at("median_s").get<double>();
  return std::string("; ") + (v2 ? "v2" : "v1") + " faster by " + margin + " (noise " + noise + ")";
}

// "fp16", or "fp16 kv=fp8_e4m3" for a point whose KV cache is fp8 (table version 5).
std::string dtype_words(const json& p) {
  std::string s = p.at("dtype").get<std::string>();
  if (p.contains("kv_dtype") && p["kv_dtype"].is_string()) {
    s += " kv=" + p["kv_dtype"].get<std::string>();
  }
  return s;
}

// "fp16 d=128 bs=16 kvh=8 gqa=4 batch=4" (no batch for a batch rule), with the mask where it is
// not plain causal.
std::string point_words(const json& p) {
  std::ostringstream s;
  s << dtype_words(p) << " d=" << p.at("head_dim").get<int>()
    << " bs=" << p.at("block_size").get<int>() << " kvh=" << p.at("num_kv_heads").get<int>()
    << " gqa=" << p.at("gqa_ratio").get<int>();
  if (p.contains("batch")) { // a batch rule covers every batch
    s << " batch=" << p.at("batch").get<int>();
  }
  if (p.at("window_left").get<int>() >= 0 || p.at("window_right").get<int>() >= 0) {
    s << " window=" << p.at("window_left").get<int>() << "," << p.at("window_right").get<int>();
  }
  if (p.at("softcap").get<double>() > 0) {
    s << " softcap=" << p.at("softcap").get<double>();
  }
  if (!p.at("causal").get<bool>()) {
    s << " non-causal";
  }
  return s.str();
}

// One noisy decision: what the table chose and from where, the medians against the noise, and
// the switch it could move.
std::string noisy_words(const json& p, const json& n) {
  const std::string decision = n.at("decision").get<std::string>();
  const std::string faster = n.at("faster").get<std::string>();
  std::string w =
      point_words(p) + " ctx " + std::to_string(n.at("context_len").get<int>()) + ": " + decision;
  w += n.at("carried_from").is_null()
           ? " by default (no length beyond noise)"
           : " carried from ctx " + std::to_string(n.at("carried_from").get<int>());
  w += (decision == faster ? "; " : ", though ") + faster + "'s median is " +
       pct(n.at("margin").get<double>()) + " faster (within the noise of " +
       pct(n.at("noise").get<double>()) + ")";
  if (!n.at("switch_at").is_null()) {
    w += "; the switch to " + std::string(decision == "v1" ? "v2" : "v1") + " before ctx " +
         std::to_string(n.at("switch_at").get<int>()) + " could lie this early";
  }
  if (n.value("hides_switch", false)) {
    w += "; " + faster + "'s median is faster at every length of this run: a switch to " + faster +
         " the noise may hide";
  }
  if (n.value("remeasured", false)) {
    w += "; still within noise after --remeasure-noisy";
  }
  return w;
}

void describe_noisy_decisions(std::ostringstream& s, const json& t) {
  const NoisyDecisions n = noisy_decisions_of(t);
  if (!n.listed) {
    return; // made before tables listed them
  }
  s << "\nnoisy decisions: " << noisy_headline(n) << "\n";
  for (const auto& line : n.lines) {
    s << "  " << line << "\n";
  }
  if (n.count > 0) {
    s << noisy_remedy(n, "attn-tune sweep --resume --remeasure-noisy (with the sweep's --profile, "
                         "--out and device)")
      << "\n";
  }
}

// " (the kernel chooses its splits)" after a measured decode_v2 without a partition.
std::string splits_words(const json& timed) {
  if (!timed.is_object()) {
    return "";
  }
  const json& c = timed.at("config");
  return c.at("family") == "decode_v2" && !c.at("params").contains("partition")
             ? " (" + partition_words(kKernelSplits) + ")"
             : "";
}

void describe_decode_points(std::ostringstream& s, const json& decode, int version) {
  if (version >= 2) {
    s << "\ndecode points: where v2 (its best configuration) is chosen over v1; a length where "
         "the\n"
      << "two are within the measured noise keeps the decision of the length before it\n";
  } else {
    s << "\ndecode points: where v2 (its best configuration) becomes faster than v1 and stays "
         "faster\n";
  }
  for (const auto& p : decode) {
    s << "  " << point_words(p) << ": " << describe_decision(p) << "\n";
    for (const auto& m : p.at("measured")) {
      s << "      ctx " << m.at("context_len").get<int>() << ": v1 " << fmt_us(m.at("v1"))
        << " us, v2 " << fmt_us(m.at("v2")) << " us" << splits_words(m.at("v2")) << ", best "
        << m.at("best").at("config").at("key").get<std::string>() << describe_noise(m) << "\n";
    }
  }
}

void describe_prefill_points(std::ostringstream& s, const json& prefill) {
  if (prefill.empty()) {
    return;
  }
  s << "\nprefill points: best configuration\n";
  for (const auto& p : prefill) {
    s << "  " << dtype_words(p) << " d=" << p.at("head_dim").get<int>()
      << " h=" << p.at("num_heads").get<int>() << " kvh=" << p.at("num_kv_heads").get<int>()
      << " batch=" << p.at("batch").get<int>() << " q=" << p.at("q_len").get<int>()
      << " k=" << p.at("k_len").get<int>() << ": " << fmt_us(p.at("best")) << " us "
      << p.at("best").at("config").at("key").get<std::string>()
      << (p.value("held_out", false) ? " (held out)" : "") << "\n";
  }
}

} // namespace

NoisyDecisions noisy_decisions_of(const json& t) {
  NoisyDecisions out;
  // (rank, line): next to a switch first, then against the median, then the rest; stable.
  std::vector<std::pair<int, std::string>> ranked;
  for (const auto& p : t.at("decode")) {
    if (!p.contains("noisy_decisions")) {
      continue;
    }
    out.listed = true;
    for (const auto& n : p.at("noisy_decisions")) {
      const bool at_switch = !n.at("switch_at").is_null();
      const bool against = n.at("decision") != n.at("faster");
      ++out.count;
      out.at_switch += at_switch ? 1 : 0;
      out.against_median += against ? 1 : 0;
      out.remeasured += n.value("remeasured", false) ? 1 : 0;
      ranked.emplace_back(at_switch ? 0 : against ? 1 : 2, noisy_words(p, n));
    }
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [rank, line] : ranked) {
    out.lines.push_back(std::move(line));
  }
  return out;
}

std::string noisy_headline(const NoisyDecisions& n) {
  if (n.count == 0) {
    return "none: no switch between v1 and v2 borders or hides in timings within noise (ties "
           "elsewhere cost less than the noise either way)";
  }
  std::string h = std::to_string(n.count) + (n.count == 1 ? " decision rests" : " decisions rest") +
                  " on timings within noise (v1 and v2 medians no further apart than their "
                  "interquartile range, the decision carried from another length) next to a "
                  "switch or against the medians of a run of such lengths, so re-measuring "
                  "could change the table's answer there";
  if (n.at_switch > 0) {
    h += "; " + std::to_string(n.at_switch) +
         " next to a switch between v1 and v2, which could move";
  }
  if (n.against_median > 0) {
    h += "; " + std::to_string(n.against_median) + " keep" + (n.against_median == 1 ? "s" : "") +
         " the family with the slower median";
  }
  return h;
}

std::string noisy_remedy(const NoisyDecisions& n, const std::string& command) {
  if (n.count > 0 && n.remeasured == n.count) {
    return "all were re-timed with " + std::to_string(kRemeasureFactor) +
           "x the repetitions already: v1 and v2 are that close on this machine; a quieter "
           "machine may still tell them apart";
  }
  std::string r = "re-time them with " + std::to_string(kRemeasureFactor) +
                  "x the repetitions: " + command + ", or sweep on a quieter machine";
  if (n.remeasured > 0) {
    r += " (" + std::to_string(n.remeasured) + " stayed within noise after re-timing already)";
  }
  return r;
}

std::string describe_table(const nlohmann::json& t) {
  std::ostringstream s;
  describe_provenance(s, t);
  describe_rule(s, t.at("rule"));
  describe_regret(s, t);
  describe_batches(s, t);
  describe_decode_points(s, t.at("decode"), t.at("version").get<int>());
  describe_noisy_decisions(s, t);
  if (const auto lines = inferred_decision_lines(t); !lines.empty()) {
    s << "\ninferred decisions (adaptive search): " << lines.size() << " point"
      << (lines.size() == 1 ? "" : "s") << " with lengths not measured\n";
    for (const auto& line : lines) {
      s << "  " << line << "\n";
    }
  }
  describe_prefill_points(s, t.at("prefill"));
  return s.str();
}

} // namespace attn::cli
