#include "src/tuning/merge.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "src/io/atomic_file.h"
#include "src/io/folder_lock.h"
#include "src/model/errors.h"
#include "src/tuning/adaptive_search.h"
#include "src/tuning/profile.h"
#include "src/tuning/provenance.h"
#include "src/tuning/results_file.h"
#include "src/tuning/sweep.h"
#include "src/tuning/threshold_table.h"
#include "src/tuning/workloads.h"

namespace attn {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A sweep folder whose lines a merge counts: the lines it wrote and how many were race timings.
struct TimedFolder {
  std::string folder; // absolute
  int timings = 0;
  int race_timings = 0;
};

struct Folder {
  MergedFolder info;
  json header;
  std::vector<json> lines; // the last line of each key, in the file's order of first appearance
  // The sweep folders whose lines these are: itself, or for a merged folder the ones its header
  // names (merged.timed_folders), so that a merge of merges counts each sweep's lines once.
  std::vector<TimedFolder> timed;
};

ShardSpec shard_of_header(const json& h) {
  if (!h.contains("shard")) {
    return {};
  }
  return {.index = h["shard"].value("index", 0), .count = h["shard"].value("count", 1)};
}

// The device model a folder measured on: name and backend (and worker threads on the CPU, which
// change timings as much as the model does); not the GPU's UUID, since shards run on different
// GPUs of one model.
std::string device_model(const json& h) {
  const json d = h.value("device", json::object());
  std::string s = d.value("name", "?") + " (" + d.value("backend", "?");
  if (d.value("backend", "") != "cuda") {
    s += ", " + std::to_string(d.value("threads", 0)) + " threads";
  }
  return s + ")";
}

// A shard folder's lines; nullopt, with `unstarted_ok` (--partial), for a folder whose sweep has
// not written its header yet (killed before its first line, or not started: no results.jsonl or
// an empty one), which is then a missing shard rather than an error.
std::optional<Folder> read_folder(const std::string& dir, bool unstarted_ok) {
  const std::string path = (fs::path(dir) / "results.jsonl").string();
  std::error_code ec;
  const bool folder = fs::is_directory(dir, ec);
  if (!fs::is_regular_file(path)) {
    if (unstarted_ok && folder && !fs::exists(path, ec)) {
      return std::nullopt;
    }
    throw InputError("'" + dir + "' has no results.jsonl (not a sweep output folder)");
  }
  ResultsFile rf = read_results(path); // whole lines only: a sweep may be appending
  if (rf.header.is_null()) {
    if (unstarted_ok) {
      return std::nullopt;
    }
    throw InputError(path + " has no header line (its sweep has not started)");
  }
  Folder f;
  f.header = rf.header;
  f.info.dir = dir;
  f.info.shard = shard_of_header(rf.header);
  f.info.expected = rf.header.contains("plan") ? rf.header["plan"].value("measurements", -1) : -1;
  // The last line of a key stands (a retried measurement), in the place of the first.
  std::map<std::string, std::size_t> last;
  for (std::size_t i = 0; i < rf.lines.size(); ++i) {
    last[record_key(rf.lines[i].value("workload_key", ""), rf.lines[i].value("config_key", ""))] =
        i;
  }
  std::set<std::string> taken;
  for (const auto& l : rf.lines) {
    const std::string key = record_key(l.value("workload_key", ""), l.value("config_key", ""));
    if (taken.insert(key).second) {
      f.lines.push_back(rf.lines[last.at(key)]);
    }
  }
  f.info.measured = int(f.lines.size());
  // The lines the folder's search wrote, superseded ones included (a merged folder keeps one line
  // per pair, and its header the counts of the sweeps merged into it; one merged before those
  // were recorded counts as a sweep of its own lines).
  const json* m = rf.header.contains("merged") ? &rf.header["merged"] : nullptr;
  if (m != nullptr && m->is_object() && m->contains("timed_folders") &&
      (*m)["timed_folders"].is_array()) {
    const auto count = [](const json& s, const char* k) {
      return s.contains(k) && s[k].is_number_integer() ? s[k].get<int>() : 0;
    };
    for (const json& s : (*m)["timed_folders"]) {
      if (s.is_object() && s.contains("folder") && s["folder"].is_string()) {
        f.timed.push_back(
            {s["folder"].get<std::string>(), count(s, "timings"), count(s, "race_timings")});
      }
    }
  } else {
    std::error_code ec;
    TimedFolder t{fs::weakly_canonical(fs::absolute(dir, ec), ec).string(), int(rf.lines.size()),
                  0};
    for (const json& l : rf.lines) {
      t.race_timings += is_race_line(l) ? 1 : 0;
    }
    f.timed.push_back(t);
  }
  for (const TimedFolder& t : f.timed) {
    f.info.timings += t.timings;
    f.info.race_timings += t.race_timings;
  }
  // An adaptive search measures part of its plan: it is complete when it says it has finished.
  f.info.reopened = rf.search_reopened;
  f.info.complete = search_mode_of(rf.header) == "adaptive"
                        ? !rf.search_end.is_null()
                        : f.info.expected < 0 || f.info.measured >= f.info.expected;
  return f;
}

// Refuses, in one line, a folder that does not belong with the first one.
void check_same_sweep(const Folder& a, const Folder& b) {
  const json& x = a.header;
  const json& y = b.header;
  const std::string pair = "'" + b.info.dir + "' and '" + a.info.dir + "'";
  if (search_mode_of(x) != search_mode_of(y)) {
    throw InputError("cannot merge " + pair + ": one was swept with --search " + search_mode_of(y) +
                     ", the other with --search " + search_mode_of(x) +
                     "; a table's provenance names one search");
  }
  if (device_model(x) != device_model(y)) {
    throw InputError("cannot merge " + pair + ": measured on " + device_model(y) + " and on " +
                     device_model(x) + "; a table holds one device model");
  }
  const json builtin = {{"source", "built-in"}, {"name", "attn-tune"}};
  const json kx = x.contains("kernels") ? x["kernels"] : builtin;
  const json ky = y.contains("kernels") ? y["kernels"] : builtin;
  if (kernels_identity(kx) != kernels_identity(ky) ||
      x.value("kernel_sources_sha256", "") != y.value("kernel_sources_sha256", "")) {
    throw InputError("cannot merge " + pair + ": they timed different kernels (" +
                     kernels_label(ky) + ", sources " +
                     y.value("kernel_sources_sha256", "?").substr(0, 12) + " vs " +
                     kernels_label(kx) + ", sources " +
                     x.value("kernel_sources_sha256", "?").substr(0, 12) + ")");
  }
  // The same kernels declare the same rule; a header that says otherwise was edited by hand.
  if (kx.value("engine_rule", "") != ky.value("engine_rule", "")) {
    throw InputError("cannot merge " + pair + ": their kernels name different engine rules ('" +
                     ky.value("engine_rule", "") + "' vs '" + kx.value("engine_rule", "") + "')");
  }
  if (x.value("profile_hash", "") != y.value("profile_hash", "")) {
    throw InputError("cannot merge " + pair + ": profiles differ ('" + y.value("profile", "?") +
                     "' hash " + y.value("profile_hash", "?") + " vs '" + x.value("profile", "?") +
                     "' hash " + x.value("profile_hash", "?") + ")");
  }
  if (x.value("tool_version", "") != y.value("tool_version", "")) {
    throw InputError("cannot merge " + pair + ": made by attn-tune " +
                     y.value("tool_version", "?") + " and " + x.value("tool_version", "?"));
  }
  if (x.value("timing_mode", "events") != y.value("timing_mode", "events")) {
    throw InputError("cannot merge " + pair + ": timed with --timing " +
                     y.value("timing_mode", "events") + " and " + x.value("timing_mode", "events"));
  }
  if (x.value("seed", uint64_t(0)) != y.value("seed", uint64_t(0))) {
    throw InputError("cannot merge " + pair + ": made with different --seed values");
  }
  if (a.info.shard.count != b.info.shard.count) {
    throw InputError("cannot merge " + pair + ": they are shards of different splits (" +
                     b.info.shard.text() + " and " + a.info.shard.text() + ")");
  }
}

// Interquartile range over median: the spread that tells a measurement's noise.
double spread(const json& line) {
  if (line.value("status", "") != "ok" || !line.contains("timing")) {
    return 1e300;
  }
  const json& t = line["timing"];
  const double m = t.value("median_s", 0.0);
  return m > 0 ? (t.value("p75_s", m) - t.value("p25_s", m)) / m : 1e300;
}

// Which of two lines of one key to keep: a timed one over any other, then an adaptive search's
// full timing over its brief race timing (the table chooses from full timings only; a race's
// few repetitions can show the lower spread), then the lower spread.
bool better(const json& candidate, const json& kept) {
  const bool c_ok = candidate.value("status", "") == "ok";
  const bool k_ok = kept.value("status", "") == "ok";
  if (c_ok != k_ok) {
    return c_ok;
  }
  const bool c_full = line_stage(candidate) == SearchStage::full;
  if (c_full != (line_stage(kept) == SearchStage::full)) {
    return c_full;
  }
  return spread(candidate) < spread(kept);
}

std::string spread_text(const json& line) {
  const double s = spread(line);
  if (s >= 1e300) {
    return line.value("status", "?");
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "spread %.1f%%", s * 100.0);
  return buf;
}

// The order an unsharded sweep would have written: the profile's workloads in plan order, when
// the profile is built in and unchanged; otherwise the folders' order.
std::vector<Workload> builtin_plan(const json& header) {
  try {
    if (!builtin_profile_text(header.value("profile", ""))) {
      return {};
    }
    const Profile prof = load_profile(header.value("profile", ""));
    if (prof.hash != header.value("profile_hash", "")) {
      return {};
    }
    return expand_workloads(prof);
  } catch (const InputError&) {
    return {};
  }
}

std::map<std::string, int> plan_order(const json& header) {
  std::map<std::string, int> order;
  const std::vector<Workload> ws = builtin_plan(header);
  for (std::size_t i = 0; i < ws.size(); ++i) {
    order.emplace(ws[i].key(), int(i));
  }
  return order;
}

// Where the shards' profile is a built-in one (its workloads known here), a line of another
// workload or drawn from another seed's data was pasted in from another sweep: refused naming it,
// as a damaged line is. (Which configurations the kernels offer is the kernels' to say; a sweep's
// --resume checks those.)
void refuse_foreign_workloads(const std::vector<Folder>& folders) {
  const std::vector<Workload> ws = builtin_plan(folders.front().header);
  if (ws.empty()) {
    return;
  }
  std::map<std::string, const Workload*> by_key;
  for (const Workload& w : ws) {
    by_key.emplace(w.key(), &w);
  }
  const uint64_t sweep_seed = folders.front().header.value("seed", uint64_t(1));
  for (const Folder& f : folders) {
    for (std::size_t n = 0; n < f.lines.size(); ++n) {
      const json& l = f.lines[n];
      const std::string wk = l.value("workload_key", "");
      const std::string which = "'" + f.info.dir + "': measurement " + std::to_string(n + 1) +
                                " (" + wk + " " + l.value("config_key", "") + ")";
      const auto w = by_key.find(wk);
      if (w == by_key.end()) {
        throw InputError(which + " is no workload of profile " +
                         folders.front().header.value("profile", "") +
                         ": a line from another sweep");
      }
      if (const std::string why = other_seed_reason(l, *w->second, sweep_seed); !why.empty()) {
        throw InputError(which + " " + why);
      }
    }
  }
}

// A merge replaces OUT's results and table: an earlier merge's, or a sweep's of the same profile
// (the shards measured that sweep's plan again). Results of another profile there are another
// sweep's, not the merge's to remove: refused, as a sweep refuses to mix runs. Returns how many
// measurements of a sweep's own (not a merge's) results it replaces, for the command to say (an
// outside audit saw a merge discard a finished sweep's without a word).
int refuse_to_replace_other_results(const std::string& out_dir, const json& shards_header) {
  const fs::path existing = fs::path(out_dir) / "results.jsonl";
  std::error_code ec;
  if (!fs::exists(existing, ec)) {
    return 0;
  }
  const ResultsFile rf = read_results(existing.string());
  const json& header = rf.header;
  if (header.value("profile_hash", std::string()) !=
      shards_header.value("profile_hash", std::string())) {
    throw InputError("'" + out_dir + "' holds the results of another profile (" +
                     header.value("profile", std::string("?")) + ", hash " +
                     header.value("profile_hash", std::string("?")) +
                     ") than the shards, which a merge would replace: merge into another "
                     "folder");
  }
  return header.contains("merged") ? 0 : int(rf.lines.size());
}

} // namespace

MergeSummary merge_shards(const std::string& out_dir, const std::vector<std::string>& dirs,
                          const MergeOptions& opt) {
  if (dirs.empty()) {
    throw InputError("merge needs at least one shard folder");
  }
  std::error_code ec;
  for (std::size_t i = 0; i < dirs.size(); ++i) {
    const std::string& d = dirs[i];
    if (fs::exists(out_dir, ec) && fs::exists(d, ec) && fs::equivalent(out_dir, d, ec)) {
      throw InputError("the output folder '" + out_dir + "' is also an input; choose another");
    }
    for (std::size_t k = 0; k < i; ++k) {
      if (fs::exists(d, ec) && fs::exists(dirs[k], ec) && fs::equivalent(dirs[k], d, ec)) {
        throw InputError("'" + d + "' is given twice (as '" + dirs[k] + "'): each shard once");
      }
    }
  }
  // One writer per folder: a sweep (or another merge) writing into OUT holds its lock. Taken
  // first when OUT exists, so a busy folder is refused before any work; a new OUT is made and
  // locked only once the merge has everything to write, so a refused merge makes no folder.
  std::optional<FolderLock> lock;
  if (fs::is_directory(out_dir, ec)) {
    lock.emplace(out_dir);
  }
  std::vector<Folder> folders;
  for (const auto& d : dirs) {
    std::optional<Folder> f = read_folder(d, opt.partial);
    if (!f) {
      if (opt.info != nullptr) {
        std::fprintf(opt.info,
                     "merge: '%s' holds no measurement yet (its sweep has not started): "
                     "counted as a missing shard\n",
                     d.c_str());
      }
      continue;
    }
    folders.push_back(std::move(*f));
    check_same_sweep(folders.front(), folders.back());
  }
  if (folders.empty()) {
    throw InputError("no shard folder holds a measurement yet: nothing to merge");
  }
  refuse_foreign_workloads(folders);
  const int replaced_own = refuse_to_replace_other_results(out_dir, folders.front().header);
  MergeSummary sum;
  sum.replaced_own = replaced_own;
  sum.shard_count = folders.front().info.shard.count;

  // One line per key: the better of the folders' lines, in first-seen order.
  std::vector<json> merged;
  std::map<std::string, std::pair<std::size_t, std::string>> at; // key -> (index, folder)
  for (const Folder& f : folders) {
    for (const json& l : f.lines) {
      const std::string key = record_key(l.value("workload_key", ""), l.value("config_key", ""));
      const auto it = at.find(key);
      if (it == at.end()) {
        at.emplace(key, std::make_pair(merged.size(), f.info.dir));
        merged.push_back(l);
        continue;
      }
      ++sum.duplicates;
      json& kept = merged[it->second.first];
      const bool take = better(l, kept);
      if (opt.info != nullptr) {
        const std::string& kept_dir = take ? f.info.dir : it->second.second;
        std::fprintf(opt.info, "merge: %s is in '%s' (%s) and '%s' (%s); kept the one from '%s'\n",
                     key.c_str(), it->second.second.c_str(), spread_text(kept).c_str(),
                     f.info.dir.c_str(), spread_text(l).c_str(), kept_dir.c_str());
      }
      if (take) {
        kept = l;
        it->second.second = f.info.dir;
      }
    }
  }
  const std::map<std::string, int> order = plan_order(folders.front().header);
  if (!order.empty()) {
    std::stable_sort(merged.begin(), merged.end(), [&](const json& a, const json& b) {
      const auto ia = order.find(a.value("workload_key", ""));
      const auto ib = order.find(b.value("workload_key", ""));
      const int xa = ia == order.end() ? int(order.size()) : ia->second;
      const int xb = ib == order.end() ? int(order.size()) : ib->second;
      return xa < xb;
    });
  }

  // Which shards are there, and finished (by any one of their folders).
  std::set<int> present;
  std::map<int, bool> shard_complete;
  json shards = json::array();
  // The plan: each shard's once, however many folders measured it (a shard swept again, or
  // merged folders merged again).
  std::map<int, int> plan_of_shard;
  for (const Folder& f : folders) {
    sum.folders.push_back(f.info);
    present.insert(f.info.shard.index);
    shard_complete[f.info.shard.index] = shard_complete[f.info.shard.index] || f.info.complete;
    int& plan = plan_of_shard[f.info.shard.index];
    plan = std::max(plan, f.info.expected);
    shards.push_back({{"folder", f.info.dir},
                      {"shard", f.info.shard.text()},
                      {"device", f.header.value("device", json::object()).value("id", "")},
                      {"uuid", f.header.value("device", json::object()).value("uuid", "")},
                      {"measurements", f.info.measured},
                      {"timings", f.info.timings},
                      {"race_timings", f.info.race_timings},
                      {"expected", f.info.expected},
                      {"complete", f.info.complete}});
  }
  int64_t expected_total = 0;
  for (const auto& [index, plan] : plan_of_shard) {
    expected_total += plan;
  }
  for (int i = 0; i < sum.shard_count; ++i) {
    if (present.count(i) == 0) {
      sum.missing.push_back(i);
    }
  }
  bool all_complete = true;
  for (const auto& [index, done] : shard_complete) {
    all_complete = all_complete && done;
  }
  sum.complete = all_complete && sum.missing.empty();
  // The sweeps' lines, each sweep folder once (a merged folder names the ones merged into it).
  std::pair<int, int> timed_total{0, 0};
  json timed_folders = json::array();
  std::set<std::string> timed_seen;
  for (const Folder& f : folders) {
    for (const TimedFolder& t : f.timed) {
      if (timed_seen.insert(t.folder).second) {
        timed_total.first += t.timings;
        timed_total.second += t.race_timings;
        timed_folders.push_back(
            {{"folder", t.folder}, {"timings", t.timings}, {"race_timings", t.race_timings}});
      }
    }
  }
  std::string gaps;
  for (int i : sum.missing) {
    gaps += std::string(gaps.empty() ? "" : ", ") + "shard " + std::to_string(i) + "/" +
            std::to_string(sum.shard_count) + " has no folder";
  }
  for (const Folder& f : folders) {
    if (!f.info.complete && !shard_complete[f.info.shard.index]) {
      gaps += std::string(gaps.empty() ? "" : ", ") + "shard " + f.info.shard.text() + " ('" +
              f.info.dir + "') has " + std::to_string(f.info.measured) +
              (f.info.expected >= 0 ? " of " + std::to_string(f.info.expected) : "") +
              " measurements" +
              (search_mode_of(f.header) != "adaptive" ? ""
               : f.info.reopened
                   ? " and was re-timed after its adaptive search ended (--remeasure-noisy): "
                     "sweep --resume it to end the search"
                   : " and has not finished its adaptive search");
    }
  }
  if (expected_total > kMaxPlanMeasurements) {
    throw InputError("the shards' plans add up to " + std::to_string(expected_total) +
                     " measurements, more than a results file may name (" +
                     std::to_string(kMaxPlanMeasurements) + ")");
  }
  if (!sum.complete && !opt.partial) {
    throw InputError(
        "the shards are incomplete: " + gaps +
        " (wait for them or resume them, or --partial writes a table marked incomplete)");
  }
  if (!sum.complete && opt.info != nullptr) {
    std::fprintf(opt.info, "merge: incomplete: %s; the table says so (provenance.merge)\n",
                 gaps.c_str());
  }

  // The merged results file: the first folder's header, no longer one shard's.
  json header = folders.front().header;
  header.erase("shard");
  header["plan"] = {{"measurements", sum.missing.empty() ? expected_total : -1}};
  json merge_info = {{"shard_count", sum.shard_count}, {"shards", shards},
                     {"missing_shards", sum.missing},  {"complete", sum.complete},
                     {"duplicates", sum.duplicates},   {"timed_folders", timed_folders}};
  header["merged"] = merge_info;
  std::string text = header.dump() + "\n";
  for (const json& l : merged) {
    text += l.dump() + "\n";
  }
  if (search_mode_of(header) == "adaptive" && sum.complete) {
    // Every shard finished its search, so the merged folder has too: merged again, it is one
    // finished folder (without the line it was refused as a search still running).
    text += search_end_line(int(merged.size()), expected_total).dump() + "\n";
  }
  sum.results_path = (fs::path(out_dir) / "results.jsonl").string();
  sum.table_path = (fs::path(out_dir) / "threshold_table.json").string();
  sum.measurements = int(merged.size());

  const auto records = to_records(merged);
  json pv = table_provenance(header, records, merged);
  pv.erase("shard");
  if (pv.contains("search") && pv["search"].value("mode", "") == "adaptive") {
    // The merged file keeps one line per pair; the timings made are the sweeps' own.
    pv["search"]["timings"] = timed_total.first;
    pv["search"]["race_timings"] = timed_total.second;
  }
  pv["merge"] = merge_info;
  const json& dev = header.at("device");
  const int sm_count = dev.value("sm_count", dev.value("threads", 0));
  sum.table = build_threshold_table(records, pv, sm_count);
  if (!lock) {
    fs::create_directories(out_dir, ec);
    const std::error_code why = ec;
    if (!fs::is_directory(out_dir)) {
      throw InputError(
          "cannot create output folder '" + out_dir + "'" +
          (fs::exists(out_dir, ec) ? ": a file of that name is there" : ": " + why.message()));
    }
    lock.emplace(out_dir);
  }
  // The results and the table they make are replaced together or not at all.
  replace_files_together(out_dir, {{"results.jsonl", text},
                                   {"threshold_table.json", sum.table.dump(1) + "\n"}});
  if (opt.while_locked) {
    opt.while_locked();
  }
  return sum;
}

} // namespace attn
