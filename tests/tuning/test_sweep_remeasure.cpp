// `sweep --remeasure-noisy` end to end on the CPU backend's kernels, with timings that a test
// double makes up from the timing options it is given: wide spreads at the profile's
// repetitions, tight ones at remeasure_timing()'s, so that a decision rests on noise after the
// sweep and is measured after the re-timing, whatever the machine's own noise. Each run is still
// the checked run of the sweep (the CPU kernels are checked against the reference); only the
// time is the double's.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "src/backends/cpu/cpu_backend.h"
#include "src/model/errors.h"
#include "src/tuning/merge.h"
#include "src/tuning/profile.h"
#include "src/tuning/results_file.h"
#include "src/tuning/sweep.h"
#include "tests/support/files.h"

namespace attn {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// One decode point at three lengths; the CPU backend offers 2 v1 and 6 v2 configurations.
const char* kNoisyProfile = R"({"name": "noisy",
  "decode": {"batch": [1], "context_len": [64, 300, 600], "num_kv_heads": [1], "gqa_ratio": [2],
             "head_dim": [32], "block_size": [16], "dtype": ["fp32"]},
  "timing": {"warmup": 1, "min_reps": 3, "max_reps": 10, "max_seconds": 0.05}})";

// Medians in microseconds of the fastest v1 and v2 configuration per length (the others take
// 10% longer): v1 wins clearly at 64, v2 by 1.7% at 300, v2 clearly at 600.
double base_us(const KernelConfig& c, int ctx) {
  const bool v2 = c.family == Family::decode_v2;
  switch (ctx) {
  case 64:
    return v2 ? 15.0 : 10.0;
  case 300:
    return v2 ? 11.8 : 12.0;
  default:
    return v2 ? 12.0 : 20.0;
  }
}

bool fastest_of_family(const KernelConfig& c) {
  return c.key() == "decode_v1[split=0]" || c.key() == "decode_v2[partition=256,split=0]";
}

// The CPU backend's run with a made-up time: its interquartile range is 5% of the median under
// the profile's options and 0.1% under remeasure_timing()'s (min_reps 4x as many). The method
// names the options it was timed with, so the results file shows them.
class MadeUpTimeRun : public PreparedRun {
public:
  MadeUpTimeRun(std::unique_ptr<PreparedRun> inner, double median_s, bool fail_remeasured)
      : inner_(std::move(inner)), median_s_(median_s), fail_remeasured_(fail_remeasured) {}
  void poison_outputs() override { inner_->poison_outputs(); }
  void run() override { inner_->run(); }
  RunOutput download() override { return inner_->download(); }
  TimingResult time(const TimingOptions& opt) override {
    const bool more = opt.min_reps >= 3 * kRemeasureFactor;
    if (more && fail_remeasured_) {
      throw std::runtime_error("out of memory (test double)");
    }
    const double iqr = median_s_ * (more ? 0.001 : 0.05);
    TimingResult t;
    t.median_s = median_s_;
    t.min_s = t.p25_s = median_s_ - iqr / 2;
    t.max_s = t.p75_s = median_s_ + iqr / 2;
    t.rel_noise = iqr / median_s_;
    t.reps = opt.min_reps;
    t.converged = true;
    char buf[160];
    std::snprintf(buf, sizeof buf, "made up: min_reps %d, max_reps %d, max_seconds %g, noise %g",
                  opt.min_reps, opt.max_reps, opt.max_seconds, opt.target_noise);
    t.method = buf;
    return t;
  }

private:
  std::unique_ptr<PreparedRun> inner_;
  double median_s_;
  bool fail_remeasured_;
};

// The CPU backend with MadeUpTimeRun's times.
class MadeUpTimes : public Backend {
public:
  explicit MadeUpTimes(bool fail_remeasured)
      : inner_(make_cpu_backend(BackendOptions{.threads = 2, .kernels = ""})),
        fail_remeasured_(fail_remeasured) {}
  const DeviceInfo& info() const override { return inner_->info(); }
  const KernelSetDecl& declaration() const override { return inner_->declaration(); }
  std::vector<KernelConfig> config_space(Family f, const AttnParams& p) const override {
    return inner_->config_space(f, p);
  }
  std::optional<std::string> can_run(const KernelConfig& c, const Problem& pr) const override {
    return inner_->can_run(c, pr);
  }
  std::unique_ptr<PreparedRun> prepare(const Problem& pr, const KernelConfig& c) override {
    const double us = base_us(c, pr.max_k_len()) * (fastest_of_family(c) ? 1.0 : 1.1);
    return std::make_unique<MadeUpTimeRun>(inner_->prepare(pr, c), us * 1e-6, fail_remeasured_);
  }

protected:
  std::optional<std::string> refuse(const KernelConfig& c, const Problem& pr) const override {
    return inner_->can_run(c, pr);
  }
  std::unique_ptr<PreparedRun> make_run(const Problem& pr, const KernelConfig& c,
                                        const FamilyDecl&) override {
    return prepare(pr, c);
  }

private:
  std::unique_ptr<Backend> inner_;
  bool fail_remeasured_;
};

BackendMaker made_up_times(bool fail_remeasured = false) {
  return [fail_remeasured](const WorkerLink&) {
    return std::make_unique<MadeUpTimes>(fail_remeasured);
  };
}

// The lines of results.jsonl that --remeasure-noisy wrote, by config key.
std::map<std::string, json> remeasured_lines(const std::string& results) {
  std::map<std::string, json> out;
  for (const json& l : read_results(results).lines) {
    if (l.contains("remeasure_factor")) {
      out[l.value("config_key", "")] = l;
    }
  }
  return out;
}

TEST(SweepRemeasure, TimingOptionsAreScaledByTheFactor) {
  TimingOptions t;
  t.min_reps = 10;
  t.max_reps = 500;
  t.max_seconds = 0.5;
  t.target_noise = 0.02;
  const TimingOptions r = remeasure_timing(t);
  EXPECT_EQ(r.min_reps, 10 * kRemeasureFactor);
  EXPECT_EQ(r.max_reps, 500 * kRemeasureFactor);
  EXPECT_DOUBLE_EQ(r.max_seconds, 0.5 * kRemeasureFactor);
  EXPECT_DOUBLE_EQ(r.target_noise, 0.02 / kRemeasureFactor);
  EXPECT_EQ(r.warmup, t.warmup);
  EXPECT_DOUBLE_EQ(r.warmup_seconds, t.warmup_seconds);
}

TEST(SweepRemeasure, ReTimesTheNoisyDecisionsAndRebuildsTheTable) {
  const fs::path dir = test::fresh_path("sweep_remeasure");
  const Profile prof = parse_profile(json::parse(kNoisyProfile), "profile noisy");
  SweepOptions o;
  o.out_dir = dir.string();
  const SweepSummary first = run_sweep_isolated(made_up_times(), prof, o);
  ASSERT_EQ(first.total, 3 * 8);
  ASSERT_EQ(first.ok, 3 * 8);
  // 300 is within noise (1.7% apart, 5% spread): v1 is carried from 64. v2's median is the
  // lower one at 300 and at 600, so the switch comes right after 300 (switch_at names 600, the
  // first length measured on v2's side).
  const json& p = first.table["decode"][0];
  EXPECT_EQ(p["v2_from"], 301);
  ASSERT_EQ(p["noisy_decisions"].size(), 1u);
  EXPECT_EQ(p["noisy_decisions"][0]["context_len"], 300);
  EXPECT_EQ(p["noisy_decisions"][0]["decision"], "v1");
  EXPECT_EQ(p["noisy_decisions"][0]["faster"], "v2");
  EXPECT_EQ(p["noisy_decisions"][0]["carried_from"], 64);
  EXPECT_EQ(p["noisy_decisions"][0]["switch_at"], 600);
  EXPECT_EQ(first.noisy_before, 0) << "not asked to re-time";
  const std::size_t lines_before = read_results(first.results_path).lines.size();

  // --resume --remeasure-noisy: the 8 configurations at 300 are timed again with 4x the
  // repetitions; their new lines stand, and the decision is now measured there.
  o.resume = true;
  o.remeasure_noisy = true;
  const SweepSummary again = run_sweep_isolated(made_up_times(), prof, o);
  EXPECT_EQ(again.resumed, 3 * 8);
  EXPECT_EQ(again.ok, 0);
  EXPECT_EQ(again.noisy_before, 1);
  EXPECT_EQ(again.remeasure_planned, 8);
  EXPECT_EQ(again.remeasured, 8);
  EXPECT_EQ(again.remeasure_other, 0);
  EXPECT_EQ(read_results(again.results_path).lines.size(), lines_before + 8);
  const auto re = remeasured_lines(again.results_path);
  ASSERT_EQ(re.size(), 8u) << "every v1 and v2 configuration, not only the fastest two";
  for (const auto& [key, l] : re) {
    EXPECT_EQ(l["remeasure_factor"], kRemeasureFactor);
    EXPECT_EQ(l["workload"]["context_len"], 300);
    EXPECT_EQ(l["status"], "ok") << key;
    EXPECT_EQ(l["check"]["pass"], true) << "re-timed through the checked run";
    EXPECT_EQ(l["timing"]["method"], "made up: min_reps 12, max_reps 40, max_seconds 0.2, "
                                     "noise 0.005");
  }
  // v2 now wins 300 beyond noise: the switch lies between 64 (v1 by 15/10) and 300 (v2 by
  // 12/11.8), where log(v2 / v1) crosses zero: 64 * (300/64)^0.960 = 282.1.
  const json& p2 = again.table["decode"][0];
  EXPECT_EQ(p2["v2_from"], 283);
  EXPECT_EQ(p2["noisy_decisions"], json::array());
  EXPECT_EQ(again.table["measurement_counts"]["ok"], 3 * 8) << "replaced, not added";
  EXPECT_EQ(json::parse(test::read_file(dir / "threshold_table.json"))["decode"][0]["v2_from"],
            283);

  // Nothing rests on noise any more: a third run re-times nothing.
  const SweepSummary third = run_sweep_isolated(made_up_times(), prof, o);
  EXPECT_EQ(third.noisy_before, 0);
  EXPECT_EQ(third.remeasure_planned, 0);
  EXPECT_EQ(read_results(third.results_path).lines.size(), lines_before + 8);
  fs::remove_all(dir);
}

// In an adaptive folder every line says its stage and why: the re-timed ones too (they said
// nothing, an audit found, 2026-12-06).
TEST(SweepRemeasure, AnAdaptiveFoldersReTimedLinesSayTheirStage) {
  const fs::path dir = test::fresh_path("sweep_remeasure_adaptive");
  const Profile prof = parse_profile(json::parse(kNoisyProfile), "profile noisy");
  SweepOptions o;
  o.out_dir = dir.string();
  o.search = SearchMode::adaptive;
  (void)run_sweep_isolated(made_up_times(), prof, o);
  o.search.reset();
  o.resume = true;
  o.remeasure_noisy = true;
  const SweepSummary again = run_sweep_isolated(made_up_times(), prof, o);
  ASSERT_GT(again.remeasured, 0);
  const auto re = remeasured_lines(again.results_path);
  ASSERT_FALSE(re.empty());
  for (const auto& [key, l] : re) {
    EXPECT_EQ(l["search"]["stage"], "full") << key;
    EXPECT_NE(l["search"]["why"].get<std::string>().find("--remeasure-noisy"), std::string::npos);
  }
  // Lines after its search_end open the search again (the new timings may move a decision): a
  // plain resume asks the search and ends the file with a search_end line of its own.
  EXPECT_TRUE(read_results(again.results_path).search_end.is_null());
  EXPECT_TRUE(read_results(again.results_path).search_reopened);
  const std::string merged = dir.string() + "-merged";
  try {
    (void)merge_shards(merged, {dir.string()}, {});
    ADD_FAILURE() << "a folder re-timed after its search ended was merged as finished";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sweep --resume it to end the search"), std::string::npos)
        << e.what();
  }
  o.remeasure_noisy = false;
  const SweepSummary resumed = run_sweep_isolated(made_up_times(), prof, o);
  EXPECT_FALSE(read_results(resumed.results_path).search_end.is_null());
  EXPECT_FALSE(read_results(resumed.results_path).search_reopened);
  EXPECT_TRUE(merge_shards(merged, {dir.string()}, {}).complete);
  fs::remove_all(merged);
  const std::string text = test::read_file(dir / "results.jsonl");
  const std::size_t last = text.rfind('\n', text.size() - 2);
  EXPECT_EQ(json::parse(text.substr(last + 1))["type"], "search_end");
  fs::remove_all(dir);
}

TEST(SweepRemeasure, AReTimingThatEndsInAnErrorKeepsTheEarlierMeasurement) {
  const fs::path dir = test::fresh_path("sweep_remeasure_error");
  const Profile prof = parse_profile(json::parse(kNoisyProfile), "profile noisy");
  SweepOptions o;
  o.out_dir = dir.string();
  const SweepSummary first = run_sweep_isolated(made_up_times(), prof, o);
  ASSERT_EQ(first.table["decode"][0]["noisy_decisions"].size(), 1u);
  const std::size_t lines_before = read_results(first.results_path).lines.size();
  o.resume = true;
  o.remeasure_noisy = true;
  const SweepSummary again = run_sweep_isolated(made_up_times(/*fail_remeasured=*/true), prof, o);
  EXPECT_EQ(again.remeasured, 0);
  EXPECT_EQ(again.remeasure_other, 8);
  // A transient failure is reported, not written: the table keeps what it had.
  EXPECT_EQ(read_results(again.results_path).lines.size(), lines_before);
  EXPECT_EQ(again.table["measurement_counts"]["error"], 0);
  EXPECT_EQ(again.table["decode"][0]["noisy_decisions"],
            first.table["decode"][0]["noisy_decisions"]);
  fs::remove_all(dir);
}

} // namespace
} // namespace attn
