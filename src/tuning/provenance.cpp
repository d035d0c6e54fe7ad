#include "src/tuning/provenance.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "build_info.h"
#include "src/backends/timing.h"
#include "src/io/embedded.h"

namespace attn {

nlohmann::json builtin_kernel_source_files() {
  nlohmann::json files = nlohmann::json::array();
  const std::string_view all = generated::kKernelSourceFiles;
  for (std::size_t at = 0; at < all.size();) {
    const std::size_t end = all.find('\n', at);
    files.push_back(std::string(all.substr(at, end - at)));
    at = end == std::string_view::npos ? all.size() : end + 1;
  }
  return files;
}

using nlohmann::json;

namespace {

// A byte count as timing methods write it (mib_text): "192 KiB", "1.5 MiB", "512 B".
const std::regex& byte_count() {
  static const std::regex re(R"(([0-9]+(?:\.[0-9]+)?) (B|KiB|MiB)\b)");
  return re;
}

uint64_t bytes_of(const std::smatch& m) {
  const double v = std::stod(m[1].str());
  const double unit = m[2] == "MiB" ? double(1 << 20) : m[2] == "KiB" ? 1024.0 : 1.0;
  return uint64_t(v * unit + 0.5);
}

} // namespace

std::string summarise_timing_methods(const std::vector<std::string>& methods) {
  // Methods that differ only in their byte counts (how much each measurement flushed or
  // prepared) are one method with a range per count; different methods are listed apart, each
  // with how many measurements it took.
  struct Shape {
    std::vector<uint64_t> lo, hi;
    int count = 0;
    std::string first;
  };
  std::map<std::string, Shape> shapes;
  std::vector<std::string> order;
  for (const std::string& m : methods) {
    const std::string skeleton = std::regex_replace(m, byte_count(), "#");
    std::vector<uint64_t> counts;
    for (auto it = std::sregex_iterator(m.begin(), m.end(), byte_count());
         it != std::sregex_iterator(); ++it) {
      counts.push_back(bytes_of(*it));
    }
    auto [at, fresh] = shapes.try_emplace(skeleton);
    Shape& sh = at->second;
    if (fresh) {
      order.push_back(skeleton);
      sh.lo = sh.hi = counts;
      sh.first = m;
    }
    for (std::size_t i = 0; i < counts.size() && i < sh.lo.size(); ++i) {
      sh.lo[i] = std::min(sh.lo[i], counts[i]);
      sh.hi[i] = std::max(sh.hi[i], counts[i]);
    }
    ++sh.count;
  }
  std::string out;
  for (const std::string& skeleton : order) {
    const Shape& sh = shapes.at(skeleton);
    std::string text;
    std::size_t k = 0;
    for (char c : skeleton) {
      if (c != '#' || k >= sh.lo.size()) {
        text += c;
        continue;
      }
      text += sh.lo[k] == sh.hi[k] ? mib_text(sh.lo[k])
                                   : mib_text(sh.lo[k]) + " to " + mib_text(sh.hi[k]);
      ++k;
    }
    if (order.size() > 1) {
      text += " (" + std::to_string(sh.count) + " measurements)";
    }
    out += (out.empty() ? "" : "; ") + text;
  }
  return out;
}

json search_provenance(const json& header, const std::vector<json>& lines) {
  const std::string mode = search_mode_of(header);
  json out = {{"mode", mode}};
  if (mode != "adaptive") {
    return out;
  }
  std::set<std::string> pairs;
  int race = 0;
  for (const json& l : lines) {
    pairs.insert(record_key(l.value("workload_key", ""), l.value("config_key", "")));
    race += is_race_line(l) ? 1 : 0;
  }
  const int exhaustive = header.contains("plan") ? header["plan"].value("measurements", -1) : -1;
  out["measurements"] = int(pairs.size());
  out["timings"] = int(lines.size());
  out["race_timings"] = race;
  out["exhaustive_measurements"] = exhaustive;
  if (exhaustive > 0) {
    out["fraction"] = double(pairs.size()) / exhaustive;
  }
  for (const char* k :
       {"race_margin", "direct_candidates", "race_survivors", "hopeless_margin", "race_timing"}) {
    if (header["search"].contains(k)) {
      out[k] = header["search"][k];
    }
  }
  return out;
}

std::string search_words(const json& table) {
  const json pv = table.value("provenance", json::object());
  const json sp = pv.value("search", json::object());
  const std::string mode = sp.value("mode", "exhaustive");
  if (mode != "adaptive") {
    return mode;
  }
  const int made = sp.value("measurements", 0);
  const int of = sp.value("exhaustive_measurements", -1);
  std::string w = "adaptive: " + std::to_string(made) + " measurements";
  if (of > 0) {
    w += " of the " + std::to_string(of) + " an exhaustive sweep makes (" +
         std::to_string(int(std::lround(100.0 * made / of))) + "%)";
  }
  return w + ", in " + std::to_string(sp.value("timings", 0)) + " timings (" +
         std::to_string(sp.value("race_timings", 0)) + " brief race timings)";
}

std::vector<std::string> inferred_decision_lines(const json& table) {
  std::vector<std::string> out;
  for (const json& p : table.value("decode", json::array())) {
    if (!p.contains("search") || p["search"].value("inferred", json::array()).empty()) {
      continue;
    }
    std::vector<int> measured;
    for (const json& m : p.value("measured", json::array())) {
      measured.push_back(m.value("context_len", 0));
    }
    std::sort(measured.begin(), measured.end());
    // Each inferred length with the measured ones on either side of it, whose winners decide it.
    std::string ctx;
    for (const json& c : p["search"]["inferred"]) {
      const int len = c.is_number_integer() ? c.get<int>() : 0;
      const auto above = std::upper_bound(measured.begin(), measured.end(), len);
      std::string around;
      if (above != measured.begin()) {
        around = std::to_string(*(above - 1));
      }
      if (above != measured.end()) {
        around += (around.empty() ? "" : " and ") + std::to_string(*above);
      }
      ctx += (ctx.empty() ? "ctx " : ", ctx ") + std::to_string(len) +
             (around.empty() ? "" : " (from the measured " + around + ")");
    }
    out.push_back(p.value("dtype", "?") + " d=" + std::to_string(p.value("head_dim", 0)) +
                  " bs=" + std::to_string(p.value("block_size", 0)) +
                  " kvh=" + std::to_string(p.value("num_kv_heads", 0)) +
                  " gqa=" + std::to_string(p.value("gqa_ratio", 0)) +
                  " batch=" + std::to_string(p.value("batch", 0)) + ": " + ctx +
                  " not measured; each decision there rests on a bisection step");
  }
  return out;
}

json timing_options_json(const TimingOptions& t) {
  return {{"warmup", t.warmup},           {"warmup_seconds", t.warmup_seconds},
          {"min_reps", t.min_reps},       {"max_reps", t.max_reps},
          {"max_seconds", t.max_seconds}, {"target_noise", t.target_noise},
          {"flush_cache", t.flush_cache}, {"mode", timing_mode_name(t.mode)}};
}

json table_provenance(const json& header, const std::vector<MeasurementRecord>& records,
                      const std::vector<json>& lines) {
  std::vector<json> timings;
  for (const auto& l : lines) {
    if (l.contains("timing")) {
      timings.push_back(l["timing"]);
    }
  }
  std::vector<std::string> methods;
  for (const auto& r : records) {
    if (r.status == "ok" && !r.method.empty()) {
      methods.push_back(r.method);
    }
  }
  const std::string method = summarise_timing_methods(methods);
  // The kernels' sources: the embedded kernel files, or the plugin library that was timed.
  const json kernels = header.value("kernels", json::object());
  const bool plugin = kernels.value("source", "") == "plugin";
  json k = kernels.is_object() && !kernels.empty()
               ? kernels
               : json{{"source", "built-in"}, {"name", "attn-tune"}};
  std::string sources = header.value("kernel_sources_sha256", "");
  if (sources.empty()) {
    sources =
        plugin ? kernels.value("library_sha256", "") : std::string(generated::kKernelSourcesSha256);
  }
  // The files the built-in kernels' hash covers, where it is this binary's (a merge of folders
  // from another build keeps their hash, and names no files).
  if (!plugin && sources == generated::kKernelSourcesSha256) {
    k["source_files"] = builtin_kernel_source_files();
  }
  json pv = {{"device", header.at("device")},
             {"tool",
              {{"name", "attn-tune"},
               {"version", header.value("tool_version", ATTN_VERSION)},
               {"git_hash", header.value("git_hash", ATTN_GIT_HASH)}}},
             {"kernels", k},
             {"kernel_sources_sha256", sources},
             {"profile",
              {{"name", header.value("profile", "")}, {"hash", header.value("profile_hash", "")}}},
             {"created_utc", utc_now()},
             {"timing_method", method},
             {"timing_mode", header.value("timing_mode", "events")},
             {"clocks", clock_summary(timings)}};
  if (header.contains("timing_options")) {
    pv["timing_options"] = header["timing_options"];
  }
  if (json waits = cpu_wait_summary(timings); !waits.is_null()) {
    pv["cpu_wait"] = std::move(waits);
  }
  pv["seed"] = header.value("seed", uint64_t(0));
  pv["search"] = search_provenance(header, lines);
  if (header.contains("shard")) {
    pv["shard"] = {{"index", header["shard"].value("index", 0)},
                   {"count", header["shard"].value("count", 1)}};
  }
  return pv;
}

} // namespace attn
