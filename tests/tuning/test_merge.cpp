// Tests of `merge`: one real sweep on the CPU backend, its results.jsonl split into shard folders
// by the shard function and merged, must decide exactly what the unsharded table decides; merge
// refuses folders of another device, profile or tool version, and incomplete shards unless
// partial; a key measured twice keeps the lower spread and says so; a half-written last line is
// not read.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sys/stat.h>
#include <unistd.h>

#include "src/backends/registry.h"
#include "src/io/folder_lock.h"
#include "src/model/errors.h"
#include "src/tuning/merge.h"
#include "src/tuning/sweep.h"
#include "src/tuning/workloads.h"

namespace attn {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* kProfile = R"({
  "name": "merge-test",
  "decode": {"batch": [1, 3], "context_len": [16, 300, 1100], "num_kv_heads": [1, 2],
             "gqa_ratio": [2], "head_dim": [16], "block_size": [16], "dtype": ["fp32"]},
  "prefill": {"batch": [1], "q_len": [16, 48], "k_len": [48], "num_kv_heads": [1],
              "num_heads": [2], "head_dim": [16], "block_size": [16], "dtype": ["fp32"]},
  "configs": {"decode_v1": "auto", "decode_v2": "auto", "prefill": "auto"},
  "timing": {"warmup": 1, "warmup_seconds": 0.0, "min_reps": 3, "max_reps": 5,
             "max_seconds": 0.01, "flush_cache": false},
  "validation": {"max_reference_work": 1e9, "min_rows": 2},
  "held_out": [{"batch": 2, "context_len": 100, "num_kv_heads": 2}]
})";

fs::path dir(const std::string& name) {
  return fs::temp_directory_path() / ("attn_test_merge_" + std::to_string(::getpid())) / name;
}

void write_folder(const fs::path& d, const json& header, const std::vector<json>& lines) {
  fs::create_directories(d);
  std::ofstream f(d / "results.jsonl");
  f << header.dump() << "\n";
  for (const auto& l : lines) {
    f << l.dump() << "\n";
  }
}

// What a table decides, by point: v1/v2 intervals and each measured length's configurations.
std::map<std::string, json> decisions(const json& t) {
  std::map<std::string, json> out;
  for (const auto& p : t.at("decode")) {
    json shape = p;
    shape.erase("measured");
    shape.erase("v2_intervals");
    shape.erase("v2_from");
    json d = {{"v2_intervals", p.at("v2_intervals")}, {"v2_from", p.value("v2_from", json())}};
    for (const auto& m : p.at("measured")) {
      d["measured"].push_back({m.at("context_len"), m.at("best").at("config").at("key"),
                               m.at("v1").is_null() ? json() : m["v1"]["config"]["key"],
                               m.at("v2").is_null() ? json() : m["v2"]["config"]["key"],
                               m.value("within_noise", false)});
    }
    out["decode " + shape.dump()] = d;
  }
  for (const auto& p : t.at("prefill")) {
    json shape = p;
    shape.erase("best");
    out["prefill " + shape.dump()] = p.at("best").at("config").at("key");
  }
  return out;
}

class Merge : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    fs::remove_all(dir(""));
    prof_ = new Profile(parse_profile(json::parse(kProfile), "profile merge-test"));
    be_ = make_backend("cpu", {.threads = 1, .kernels = ""}).release();
    SweepOptions o;
    o.out_dir = dir("unsharded").string();
    o.reference_threads = 1;
    (void)run_sweep(*be_, *prof_, o);
    const ResultsFile rf = read_results((dir("unsharded") / "results.jsonl").string());
    header_ = new json(rf.header);
    lines_ = new std::vector<json>(rf.lines);
    table_ = new json(json::parse(std::ifstream(dir("unsharded") / "threshold_table.json")));
  }
  static void TearDownTestSuite() {
    fs::remove_all(dir(""));
    delete prof_;
    delete be_;
    delete header_;
    delete lines_;
    delete table_;
  }

  // The unsharded measurements split into `n` shard folders by the shard function.
  static std::vector<std::string> split(const std::string& name, int n) {
    const std::vector<Workload> ws = expand_workloads(*prof_);
    std::vector<int> counts;
    for (const auto& w : ws) {
      counts.push_back(int(configs_for(*prof_, *be_, w).size()));
    }
    const std::vector<int> shard = assign_shards(ws, counts, n);
    std::map<std::string, int> shard_of;
    std::vector<int> planned(std::size_t(n), 0);
    for (std::size_t i = 0; i < ws.size(); ++i) {
      shard_of[ws[i].key()] = shard[i];
      planned[std::size_t(shard[i])] += counts[i];
    }
    std::vector<std::vector<json>> parts(static_cast<std::size_t>(n));
    for (const auto& l : *lines_) {
      parts[std::size_t(shard_of.at(l.at("workload_key").get<std::string>()))].push_back(l);
    }
    std::vector<std::string> dirs;
    for (int i = 0; i < n; ++i) {
      json h = *header_;
      h["shard"] = {{"index", i}, {"count", n}};
      h["plan"] = {{"workloads", 0}, {"measurements", planned[std::size_t(i)]}};
      const fs::path d = dir(name) / ("shard-" + std::to_string(i));
      write_folder(d, h, parts[std::size_t(i)]);
      dirs.push_back(d.string());
    }
    return dirs;
  }

  static Profile* prof_;
  static Backend* be_;
  static json* header_;
  static std::vector<json>* lines_;
  static json* table_;
};
Profile* Merge::prof_ = nullptr;
Backend* Merge::be_ = nullptr;
json* Merge::header_ = nullptr;
std::vector<json>* Merge::lines_ = nullptr;
json* Merge::table_ = nullptr;

TEST_F(Merge, ShardsOfOneSweepDecideWhatTheUnshardedTableDecides) {
  ASSERT_GT(lines_->size(), 20u);
  for (int n : {2, 3}) {
    const auto dirs = split("split" + std::to_string(n), n);
    const MergeSummary s = merge_shards(dir("merged" + std::to_string(n)).string(), dirs, {});
    EXPECT_TRUE(s.complete);
    EXPECT_EQ(s.duplicates, 0);
    EXPECT_EQ(s.measurements, int(lines_->size()));
    EXPECT_EQ(s.shard_count, n);
    const json merged = json::parse(std::ifstream(s.table_path));
    EXPECT_NO_THROW(validate_table(merged));
    const auto want = decisions(*table_);
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(decisions(merged), want) << n << " shards";
    EXPECT_EQ(merged["measurement_counts"], (*table_)["measurement_counts"]);
    EXPECT_EQ(merged["held_out"].size(), (*table_)["held_out"].size());
    EXPECT_EQ(merged["rule"]["tiles"], (*table_)["rule"]["tiles"]);
    EXPECT_EQ(merged["rule"]["partition"], (*table_)["rule"]["partition"]);
    EXPECT_DOUBLE_EQ(merged["rule"]["k"].get<double>(), (*table_)["rule"]["k"].get<double>());
    EXPECT_EQ(merged["provenance"]["merge"]["complete"], true);
    EXPECT_EQ(merged["provenance"]["device"], (*table_)["provenance"]["device"]);
    // The kernels' engine rule comes along, so the merged table's regret names it too.
    EXPECT_EQ(merged["provenance"]["kernels"]["engine_rule"], "vllm-cpu");
    EXPECT_EQ(merged["provenance"]["timing_options"], (*table_)["provenance"]["timing_options"]);
    // The merged results file is whole: every measurement once.
    const ResultsFile rf = read_results(s.results_path);
    EXPECT_EQ(rf.lines.size(), lines_->size());
    EXPECT_FALSE(rf.header.contains("shard"));
  }
}

TEST_F(Merge, RefusesFoldersThatDoNotBelongTogether) {
  const auto dirs = split("refuse", 2);
  auto refused = [&](const std::string& field, const json& value, const std::string& says) {
    json h = *header_;
    h["shard"] = {{"index", 1}, {"count", 2}};
    if (field == "device.name") {
      h["device"]["name"] = value;
    } else if (field == "kernels.engine_rule") {
      h["kernels"]["engine_rule"] = value;
    } else {
      h[field] = value;
    }
    const fs::path other = dir("refuse") / ("other-" + field);
    write_folder(other, h, {});
    try {
      (void)merge_shards(dir("refused").string(), {dirs[0], other.string()}, {});
      ADD_FAILURE() << field << " was not refused";
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(says), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  };
  refused("device.name", "NVIDIA H100 80GB HBM3", "a table holds one device model");
  refused("profile_hash", "0123456789abcdef", "profiles differ");
  refused("tool_version", "0.0.1", "made by attn-tune 0.0.1");
  refused("kernel_sources_sha256", "feedfacefeedface", "different kernels");
  refused("timing_mode", "graph", "--timing graph");
  refused("kernels.engine_rule", "seed", "name different engine rules ('seed' vs 'vllm-cpu')");
  EXPECT_FALSE(fs::exists(dir("refused") / "threshold_table.json"));
  // The output folder cannot be an input, nor can one folder be two shards.
  EXPECT_THROW((void)merge_shards(dirs[0], dirs, {}), InputError);
  try {
    (void)merge_shards(dir("twice").string(), {dirs[0], dirs[0], dirs[1]}, {});
    ADD_FAILURE() << "a folder given twice was merged";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is given twice"), std::string::npos) << e.what();
  }
}

TEST_F(Merge, IncompleteShardsAreRefusedUnlessPartial) {
  const auto dirs = split("partial", 3);
  // Shard 2 missing; shard 1 cut short with a half-written last line, as a running sweep leaves.
  std::vector<std::string> two = {dirs[0], dirs[1]};
  const fs::path f1 = fs::path(dirs[1]) / "results.jsonl";
  const ResultsFile before = read_results(f1.string());
  ASSERT_GE(before.lines.size(), 2u);
  write_folder(dirs[1], before.header, {before.lines.begin(), before.lines.end() - 1});
  std::ofstream(f1, std::ios::app) << R"({"type": "measurement", "workload_key": "half)";
  try {
    (void)merge_shards(dir("partial-out").string(), two, {});
    ADD_FAILURE() << "incomplete shards were merged";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("shard 2/3 has no folder"), std::string::npos) << m;
    EXPECT_NE(m.find("shard 1/3"), std::string::npos) << m;
    EXPECT_NE(m.find("--partial"), std::string::npos) << m;
  }
  MergeOptions po;
  po.partial = true;
  const MergeSummary s = merge_shards(dir("partial-out").string(), two, po);
  EXPECT_FALSE(s.complete);
  EXPECT_EQ(s.missing, std::vector<int>{2});
  const json t = json::parse(std::ifstream(s.table_path));
  EXPECT_EQ(t["provenance"]["merge"]["complete"], false);
  EXPECT_EQ(t["provenance"]["merge"]["missing_shards"], json::array({2}));
  EXPECT_EQ(t["provenance"]["merge"]["shards"][1]["complete"], false);
  EXPECT_EQ(s.folders[1].measured, int(before.lines.size()) - 1); // the half line is not read
  // Shard 2's folder made by a sweep killed before its header: with --partial, a missing shard;
  // without, refused.
  const fs::path unstarted = dir("partial-unstarted");
  fs::create_directories(unstarted);
  std::ofstream(unstarted / "results.jsonl") << "";
  std::vector<std::string> three = {dirs[0], dirs[1], unstarted.string()};
  EXPECT_THROW((void)merge_shards(dir("partial-out").string(), three, {}), InputError);
  const MergeSummary s3 = merge_shards(dir("partial-out").string(), three, po);
  EXPECT_EQ(s3.missing, std::vector<int>{2});
  EXPECT_EQ(s3.folders.size(), 2u);
}

// Adaptive shards: each searches its own part of the plan and ends with a search_end line; their
// merge is complete with every such line, says adaptive with the plans' exhaustive count, and is
// refused without one (unless partial) or beside an exhaustive folder.
TEST_F(Merge, AdaptiveShardsMergeWhenEachFinishedItsSearch) {
  std::vector<std::string> dirs;
  for (int i = 0; i < 2; ++i) {
    SweepOptions o;
    o.out_dir = dir("adaptive-" + std::to_string(i)).string();
    o.reference_threads = 1;
    o.search = SearchMode::adaptive;
    o.shard = {.index = i, .count = 2};
    (void)run_sweep(*be_, *prof_, o);
    dirs.push_back(o.out_dir);
    EXPECT_FALSE(read_results(o.out_dir + "/results.jsonl").search_end.is_null());
  }
  const MergeSummary s = merge_shards(dir("adaptive-out").string(), dirs, {});
  EXPECT_TRUE(s.complete);
  const json t = json::parse(std::ifstream(s.table_path));
  EXPECT_EQ(t["provenance"]["search"]["mode"], "adaptive");
  EXPECT_EQ(t["provenance"]["search"]["exhaustive_measurements"], int(lines_->size()));
  EXPECT_LT(t["provenance"]["search"]["measurements"].get<int>(), int(lines_->size()));
  // The timings are the shards' lines, race timings a full timing superseded included (the
  // merged file keeps one line per pair).
  int timings = 0;
  int race = 0;
  for (const std::string& d : dirs) {
    for (const json& l : read_results(d + "/results.jsonl").lines) {
      ++timings;
      race += is_race_line(l) ? 1 : 0;
    }
  }
  ASSERT_GT(race, 0);
  EXPECT_EQ(t["provenance"]["search"]["timings"], timings);
  EXPECT_EQ(t["provenance"]["search"]["race_timings"], race);
  EXPECT_LT(int(read_results(s.results_path).lines.size()), timings);
  // The merged folder is a finished search too: merged again with a rerun of it (a copy here),
  // it is taken (it was refused as a search still running).
  EXPECT_FALSE(read_results(s.results_path).search_end.is_null());
  const ResultsFile merged = read_results(s.results_path);
  write_folder(dir("adaptive-copy"), merged.header, merged.lines);
  {
    std::ofstream(dir("adaptive-copy") / "results.jsonl", std::ios::app)
        << json{{"type", "search_end"}}.dump() << "\n";
  }
  const MergeSummary again =
      merge_shards(dir("adaptive-again").string(),
                   {dir("adaptive-out").string(), dir("adaptive-copy").string()}, {});
  EXPECT_TRUE(again.complete);
  // Merged again, a merged folder counts the timings of the sweeps merged into it from its header,
  // each sweep folder once (the copy names the same two); the plan is the plan once.
  const json again_search = json::parse(std::ifstream(again.table_path))["provenance"]["search"];
  EXPECT_EQ(again_search["timings"], timings);
  EXPECT_EQ(again_search["race_timings"], race);
  EXPECT_EQ(again_search["exhaustive_measurements"], int(lines_->size()));
  // A shard swept twice, into two folders: its plan counts once.
  SweepOptions rerun;
  rerun.out_dir = dir("adaptive-0-again").string();
  rerun.reference_threads = 1;
  rerun.search = SearchMode::adaptive;
  rerun.shard = {.index = 0, .count = 2};
  (void)run_sweep(*be_, *prof_, rerun);
  const MergeSummary twice =
      merge_shards(dir("adaptive-twice").string(), {dirs[0], dirs[1], rerun.out_dir}, {});
  const json twice_search = json::parse(std::ifstream(twice.table_path))["provenance"]["search"];
  EXPECT_EQ(twice_search["exhaustive_measurements"], int(lines_->size()));
  const int rerun_lines = int(read_results(rerun.out_dir + "/results.jsonl").lines.size());
  EXPECT_EQ(twice_search["timings"], timings + rerun_lines); // a rerun made its own
  // That merge and the first one, merged: each of the three sweeps' lines once.
  const MergeSummary both =
      merge_shards(dir("adaptive-both").string(),
                   {dir("adaptive-out").string(), dir("adaptive-twice").string()}, {});
  EXPECT_EQ(json::parse(std::ifstream(both.table_path))["provenance"]["search"]["timings"],
            timings + rerun_lines);
  // Shard 1 swept again to the end: a shard is finished when one of its folders is.
  SweepOptions rerun1 = rerun;
  rerun1.out_dir = dir("adaptive-1-again").string();
  rerun1.shard = {.index = 1, .count = 2};
  (void)run_sweep(*be_, *prof_, rerun1);

  // Shard 1 without its search_end: still searching.
  const std::string f1 = dirs[1] + "/results.jsonl";
  const ResultsFile rf = read_results(f1);
  write_folder(dirs[1], rf.header, rf.lines);
  EXPECT_TRUE(
      merge_shards(dir("adaptive-out4").string(), {dirs[0], dirs[1], rerun1.out_dir}, {}).complete);
  try {
    (void)merge_shards(dir("adaptive-out2").string(), dirs, {});
    ADD_FAILURE() << "an unfinished adaptive shard was merged";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("has not finished its adaptive search"), std::string::npos)
        << e.what();
  }
  // Beside an exhaustive shard of the same plan.
  const auto exhaustive = split("adaptive-mixed", 2);
  try {
    (void)merge_shards(dir("adaptive-out3").string(), {dirs[0], exhaustive[1]}, {});
    ADD_FAILURE() << "adaptive and exhaustive shards were merged";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--search"), std::string::npos) << e.what();
  }
}

TEST_F(Merge, ADuplicateKeyKeepsTheLowerSpreadAndSaysSo) {
  const auto dirs = split("dup", 2);
  // One timed line of shard 0 again in a second folder of shard 0, once noisier, once quieter.
  json line;
  for (const auto& l : *lines_) {
    if (l.value("status", "") == "ok" &&
        read_results((fs::path(dirs[0]) / "results.jsonl").string())
                .lines.front()["workload_key"] == l["workload_key"]) {
      line = l;
      break;
    }
  }
  ASSERT_FALSE(line.is_null());
  const double m = line["timing"]["median_s"].get<double>();
  json quiet = line;
  quiet["timing"]["p25_s"] = m;
  quiet["timing"]["p75_s"] = m;
  quiet["timing"]["median_s"] = m * 1.5;
  json noisy = line;
  noisy["timing"]["p25_s"] = m * 0.5;
  noisy["timing"]["p75_s"] = m * 2.0;
  json h = *header_;
  h["shard"] = {{"index", 0}, {"count", 2}};
  h["plan"] = {{"measurements", 1}};
  // And a brief race timing of the same pair, quieter and faster than all: a full timing is kept
  // over it whatever its spread (the table chooses from full timings only).
  json race = quiet;
  race["timing"]["median_s"] = m * 0.5;
  race["search"] = {{"stage", "race"}, {"why", "a race"}};
  write_folder(dir("dup") / "noisy", h, {noisy});
  write_folder(dir("dup") / "quiet", h, {quiet});
  write_folder(dir("dup") / "race", h, {race});
  char* buf = nullptr;
  std::size_t len = 0;
  FILE* info = open_memstream(&buf, &len);
  MergeOptions mo;
  mo.info = info;
  const MergeSummary s =
      merge_shards(dir("dup-out").string(),
                   {dirs[0], dirs[1], (dir("dup") / "race").string(),
                    (dir("dup") / "noisy").string(), (dir("dup") / "quiet").string()},
                   mo);
  std::fclose(info);
  const std::string said(buf, len);
  std::free(buf);
  EXPECT_EQ(s.duplicates, 3);
  EXPECT_NE(said.find("merge: " + record_key(line["workload_key"], line["config_key"]) + " is in"),
            std::string::npos)
      << said;
  // The quiet copy (spread 0) wins unless the sweep's own line is as quiet (then the first
  // stands); the noisy one never does.
  const double own =
      (line["timing"]["p75_s"].get<double>() - line["timing"]["p25_s"].get<double>());
  const ResultsFile rf = read_results(s.results_path);
  int found = 0;
  for (const auto& l : rf.lines) {
    if (l["workload_key"] == line["workload_key"] && l["config_key"] == line["config_key"]) {
      ++found;
      EXPECT_EQ(l["timing"]["median_s"].get<double>(), own > 0 ? m * 1.5 : m) << said;
    }
  }
  EXPECT_EQ(found, 1);
}

// One writer per folder: a merge into a folder another process writes (a sweep holds its lock)
// is refused before anything is written, naming the holder; a merge replaces the folder's
// results and table together, as links through one generation (docs/sharding.md).
TEST_F(Merge, IntoABusyFolderIsRefusedAndResultsAndTableSwitchTogether) {
  const auto dirs = split("lock", 2);
  const fs::path out = dir("lock-out");
  fs::create_directories(out);
  {
    std::ofstream(out / "results.jsonl") << "kept\n";
    const FolderLock busy(out.string());
    try {
      (void)merge_shards(out.string(), dirs, {});
      ADD_FAILURE() << "a merge into a locked folder went ahead";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("pid " + std::to_string(::getpid())), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(std::ifstream(out / "results.jsonl").rdbuf() != nullptr, true);
    std::string kept;
    std::getline(std::ifstream(out / "results.jsonl"), kept);
    EXPECT_EQ(kept, "kept");
  }
  // Not a results file, nor another profile's: neither is the merge's to replace.
  EXPECT_THROW((void)merge_shards(out.string(), dirs, {}), InputError);
  json other = (*header_);
  other["profile"] = "another";
  other["profile_hash"] = "0123456789abcdef";
  other.erase("shard");
  write_folder(out, other, {});
  try {
    (void)merge_shards(out.string(), dirs, {});
    ADD_FAILURE() << "a merge replaced another profile's results";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("holds the results of another profile (another"),
              std::string::npos)
        << e.what();
  }
  fs::remove(out / "results.jsonl");
  const MergeSummary s1 = merge_shards(out.string(), dirs, {});
  const MergeSummary s2 = merge_shards(out.string(), dirs, {});
  EXPECT_EQ(s1.replaced_own, 0);
  EXPECT_EQ(s2.replaced_own, 0); // an earlier merge's results
  EXPECT_EQ(s2.measurements, s1.measurements);
  EXPECT_TRUE(fs::is_symlink(out / "results.jsonl"));
  EXPECT_TRUE(fs::is_symlink(out / "threshold_table.json"));
  EXPECT_EQ(read_results((out / "results.jsonl").string()).lines.size(), lines_->size());
  EXPECT_NO_THROW(validate_table(json::parse(std::ifstream(out / "threshold_table.json"))));
  int generations = 0;
  for (const auto& e : fs::directory_iterator(out)) {
    const std::string n = e.path().filename().string();
    generations += n.rfind(".attn-tune-gen-", 0) == 0 ? 1 : 0;
    EXPECT_EQ(n.find(".tmp."), std::string::npos) << n;
  }
  EXPECT_EQ(generations, 1) << "older generations are removed";
  // Shared as a sweep's files are: the generation folder is mkdir's 0777 less the umask.
  const mode_t mask = ::umask(022);
  ::umask(mask);
  const auto gen = fs::canonical(out / "results.jsonl").parent_path();
  EXPECT_EQ(int(fs::status(gen).permissions() & fs::perms::all), int(0777 & ~mask));
}

} // namespace
} // namespace attn
