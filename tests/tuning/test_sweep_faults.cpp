// Fault isolation end to end on the CPU backend, through its test hook (ATTN_TUNE_TEST_FAULTS):
// a configuration that segfaults, one that aborts and one that hangs are each recorded as
// `fault` with its reason, every other configuration is measured, the table is written, and
// --resume leaves the faults alone unless asked to retry them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <unistd.h>

#include "src/backends/cpu/cpu_backend.h"
#include "src/model/errors.h"
#include "src/tuning/profile.h"
#include "src/tuning/results_file.h"
#include "src/tuning/sweep.h"
#include "tests/support/crash_reason.h"

namespace attn {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// One decode workload: the CPU backend's 8 configurations (decode_v1 x2 splits, decode_v2 x3
// partitions x2 splits).
const char* kProfile = R"({"name": "faults",
  "decode": {"batch": [1], "context_len": [300], "num_kv_heads": [1], "gqa_ratio": [2],
             "head_dim": [32], "block_size": [16], "dtype": ["fp32"]},
  "timing": {"warmup": 1, "min_reps": 3, "max_reps": 10, "max_seconds": 0.05}})";

constexpr const char* kSegv = "decode_v2[partition=256,split=0]";
constexpr const char* kAbort = "decode_v1[split=1]";
constexpr const char* kHang = "decode_v2[partition=1024,split=1]";

// The planted hang costs its deadline: 2 s of grace (ATTN_TUNE_UNIT_GRACE) instead of 10.
struct FaultEnv {
  explicit FaultEnv(bool hang = true) {
    const std::string spec = std::string("segv:") + kSegv + ";abort:" + kAbort +
                             (hang ? std::string(";hang:") + kHang : std::string());
    ::setenv("ATTN_TUNE_TEST_FAULTS", spec.c_str(), 1);
    ::setenv("ATTN_TUNE_UNIT_GRACE", "2", 1);
  }
  ~FaultEnv() {
    ::unsetenv("ATTN_TUNE_TEST_FAULTS");
    ::unsetenv("ATTN_TUNE_UNIT_GRACE");
  }
};

BackendMaker cpu_maker() {
  return [](const WorkerLink&) { return make_cpu_backend(BackendOptions{.threads = 2, .kernels = ""}); };
}

TEST(SweepFaults, CrashesAndHangsAreFaultsAndTheSweepGoesOn) {
  const fs::path dir =
      fs::temp_directory_path() / ("attn_sweep_faults_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const Profile prof = parse_profile(json::parse(kProfile), "profile faults");
  SweepOptions o;
  o.out_dir = dir.string();
  SweepSummary s;
  {
    const FaultEnv env;
    s = run_sweep_isolated(cpu_maker(), prof, o);
  }
  EXPECT_EQ(s.total, 8);
  EXPECT_EQ(s.faults, 3);
  EXPECT_EQ(s.ok, 5);
  EXPECT_EQ(s.errors, 0);
  EXPECT_EQ(s.table.at("measurement_counts").value("fault", 0), 3);
  EXPECT_EQ(s.table.at("measurement_counts").value("ok", 0), 5);
  EXPECT_TRUE(fs::exists(dir / "threshold_table.json"));

  const ResultsFile rf = read_results(s.results_path);
  ASSERT_EQ(rf.lines.size(), 8u);
  std::map<std::string, std::string> fault_reason;
  for (const json& l : rf.lines) {
    if (l.value("status", "") == "fault") {
      fault_reason[l.value("config_key", "")] = l.value("reason", "");
    } else {
      EXPECT_EQ(l.value("status", ""), "ok") << l.dump();
    }
  }
  ASSERT_EQ(fault_reason.size(), 3u);
  EXPECT_TRUE(test::says_sigsegv(fault_reason[kSegv])) << fault_reason[kSegv];
  EXPECT_NE(fault_reason[kAbort].find("SIGABRT"), std::string::npos) << fault_reason[kAbort];
  EXPECT_NE(fault_reason[kHang].find("timeout"), std::string::npos) << fault_reason[kHang];

  // --resume: the faults stand (the hook is still armed, so a retry would fault again).
  o.resume = true;
  {
    const FaultEnv env;
    const SweepSummary again = run_sweep_isolated(cpu_maker(), prof, o);
    EXPECT_EQ(again.resumed, 8);
    EXPECT_EQ(again.faults, 0);
    EXPECT_EQ(again.ok, 0);
    EXPECT_EQ(again.table.at("measurement_counts").value("fault", 0), 3);
  }
  EXPECT_EQ(read_results(s.results_path).lines.size(), 8u);

  // --resume --retry-faults with the kernels fixed: measured, and the table has no fault left.
  o.retry_faults = true;
  const SweepSummary fixed = run_sweep_isolated(cpu_maker(), prof, o);
  EXPECT_EQ(fixed.resumed, 5);
  EXPECT_EQ(fixed.ok, 3);
  EXPECT_EQ(fixed.table.at("measurement_counts").value("fault", 0), 0);
  EXPECT_EQ(fixed.table.at("measurement_counts").value("ok", 0), 8);
  fs::remove_all(dir);
}

// The same faults under --search adaptive: they strike in the race, are recorded as faults of the
// race, the search carries on with the rest and ends with its search_end line; --resume
// --retry-faults races them again once the kernels are fixed. Three lengths: the later ones start
// from the survivors of the first, which the faulted configurations are not among, so the search
// alone would never return to them (it did not, until 2026-12-06).
TEST(SweepFaults, AnAdaptiveSearchRecordsFaultsAndGoesOn) {
  const fs::path dir =
      fs::temp_directory_path() / ("attn_sweep_faults_adaptive_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  json pj = json::parse(kProfile);
  pj["decode"]["context_len"] = {64, 300, 1200};
  const Profile prof = parse_profile(pj, "profile faults");
  SweepOptions o;
  o.out_dir = dir.string();
  o.search = SearchMode::adaptive;
  SweepSummary s;
  {
    const FaultEnv env;
    s = run_sweep_isolated(cpu_maker(), prof, o);
  }
  // Each faulting configuration faults at every point that races all of them (the first length,
  // and 1200, more than kRaceReach doublings from it).
  EXPECT_EQ(s.faults, 6);
  EXPECT_EQ(s.table.at("measurement_counts").value("fault", 0), 6);
  const ResultsFile rf = read_results(s.results_path);
  EXPECT_FALSE(rf.search_end.is_null());
  int faults = 0;
  for (const json& l : rf.lines) {
    if (l.value("status", "") == "fault") {
      ++faults;
      EXPECT_EQ(l["search"]["stage"], "race") << l.dump();
    } else {
      EXPECT_EQ(l.value("status", ""), "ok") << l.dump();
    }
  }
  EXPECT_EQ(faults, 6);
  // The table still has both families from the configurations that did not fault.
  ASSERT_EQ(s.table["decode"].size(), 1u);
  EXPECT_FALSE(s.table["decode"][0]["measured"][0]["v1"].is_null());
  EXPECT_FALSE(s.table["decode"][0]["measured"][0]["v2"].is_null());
  std::size_t before = rf.lines.size();

  o.resume = true;
  o.search.reset(); // the folder's search
  o.retry_faults = true;
  // --retry-faults with the crashes still there (the hang fixed, which spares two deadlines):
  // each crash runs again once, faults again and stands, and the sweep ends. (A fault retried
  // and crashing its worker again was asked for again by each new worker, without end, until
  // 2026-12-06.)
  {
    const FaultEnv env(/*hang=*/false);
    const SweepSummary still = run_sweep_isolated(cpu_maker(), prof, o);
    EXPECT_EQ(still.faults, 4);
    EXPECT_EQ(still.table.at("measurement_counts").value("fault", 0), 4);
  }
  const ResultsFile retried = read_results(s.results_path);
  std::map<std::string, int> crashed_again; // pair and stage -> its lines of this command
  for (std::size_t i = before; i < retried.lines.size(); ++i) {
    const json& l = retried.lines[i];
    const std::string config = l.value("config_key", "");
    if (config == kSegv || config == kAbort) {
      EXPECT_EQ(l.value("status", ""), "fault") << l.dump();
      ++crashed_again[l.value("workload_key", "") + " " + config + " " +
                      l["search"].value("stage", "")];
    } else {
      EXPECT_EQ(l.value("status", ""), "ok") << l.dump();
    }
  }
  EXPECT_EQ(crashed_again.size(), 4u);
  for (const auto& [run, n] : crashed_again) {
    EXPECT_EQ(n, 1) << run;
  }
  before = retried.lines.size();

  const SweepSummary fixed = run_sweep_isolated(cpu_maker(), prof, o);
  EXPECT_EQ(fixed.search, SearchMode::adaptive);
  EXPECT_EQ(fixed.table.at("measurement_counts").value("fault", 0), 0);
  const ResultsFile after = read_results(s.results_path);
  int again = 0;
  for (std::size_t i = before; i < after.lines.size(); ++i) {
    const json& l = after.lines[i];
    again += l["search"]["why"].get<std::string>().find("measured again after a fault") !=
             std::string::npos;
    EXPECT_EQ(l.value("status", ""), "ok") << l.dump();
  }
  EXPECT_EQ(again, 4);
  fs::remove_all(dir);
}

TEST(SweepFaults, UnknownHookEntryIsAnInputError) {
  ::setenv("ATTN_TUNE_TEST_FAULTS", "explode:decode_v1[split=0]", 1);
  EXPECT_THROW((void)make_cpu_backend(BackendOptions{}), InputError);
  ::unsetenv("ATTN_TUNE_TEST_FAULTS");
}

} // namespace
} // namespace attn
