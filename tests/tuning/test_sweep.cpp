// Tests of the sweep driver with a deterministic test-double backend (float attention, timings
// from a formula), including a killed-and-resumed sweep; and, once the CPU backend is built in,
// the quick profile end to end on it.
#include <gtest/gtest.h>

#include <functional>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "include/attn_tune/threshold_table_reader.hpp"
#include "reference/reference.h"
#include "src/backends/registry.h"
#include "src/io/embedded.h"
#include "src/io/folder_lock.h"
#include "src/io/sha256.h"
#include "src/model/errors.h"
#include "src/tuning/provenance.h"
#include "src/tuning/sweep.h"
#include "tests/support/files.h"

namespace attn {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Synthetic cost model of the test double, in units of 0.1 us, with sm_count = 8:
//   v1:          waves(batch * kvh) * ctx
//   v2(P):       waves(batch * kvh * ceil(ctx / P)) * P + 2 (the reduce)
//   prefill(t):  q_len * k_len / t
constexpr int kSm = 8;
double formula_seconds(const Problem& pr, const KernelConfig& c) {
  auto waves = [](double tiles) { return std::ceil(tiles / kSm); };
  const double b = pr.batch;
  const double kvh = pr.params.num_kv_heads;
  double units = 0;
  if (c.family == Family::decode_v1) {
    units = waves(b * kvh) * pr.max_k_len();
  } else if (c.family == Family::decode_v2) {
    const int p = c.get("partition", 16);
    units = waves(b * kvh * std::ceil(double(pr.max_k_len()) / p)) * p + 2;
  } else {
    units = double(pr.max_q_len()) * pr.max_k_len() / c.get("q_tile", 16) + 1;
  }
  return units * 1e-7;
}

struct Counters {
  int prepared = 0;
  int timed = 0;
};

class FormulaRun : public PreparedRun {
public:
  FormulaRun(const Problem& pr, KernelConfig c, Counters& n) : pr_(pr), cfg_(std::move(c)), n_(n) {
    out_.out =
        HostTensor(pr.params.dtype, {pr.num_rows(), pr.params.num_heads, pr.params.head_dim});
    out_.lse.assign(std::size_t(pr.num_rows()) * pr.params.num_heads, 0.0f);
  }
  void poison_outputs() override {
    poison(out_.out);
    poison(out_.lse);
  }
  // Attention in float, straight from SPEC.md; config "broken=1" skips the last head's output.
  void run() override {
    const AttnParams& p = pr_.params;
    const int H = p.num_heads, D = p.head_dim, G = p.group_size();
    const float scale = float(p.effective_scale());
    const bool broken = cfg_.get("broken", 0) != 0;
    for (int b = 0; b < pr_.batch; ++b) {
      const int ql = pr_.q_len(b), kl = pr_.k_len(b);
      for (int i = 0; i < ql; ++i) {
        const int row = pr_.q_start(b) + i;
        for (int h = 0; h < H; ++h) {
          if (broken && h == H - 1) {
            continue;
          }
          std::vector<float> s(std::size_t(kl), -std::numeric_limits<float>::infinity());
          float m = -std::numeric_limits<float>::infinity();
          for (int j = 0; j < kl; ++j) {
            if (!reference_visible(p, ql, kl, i, j)) {
              continue;
            }
            const int64_t off = pr_.kv_offset(b, h / G, j);
            float dot = 0;
            for (int d = 0; d < D; ++d) {
              dot += pr_.query.get((std::size_t(row) * H + h) * D + d) *
                     pr_.key_cache.get(std::size_t(off + d));
            }
            float x = dot * scale;
            if (p.softcap > 0) {
              x = float(p.softcap * std::tanh(x / p.softcap));
            }
            s[std::size_t(j)] = x;
            m = std::max(m, x);
          }
          std::vector<float> acc(std::size_t(D), 0.0f);
          float l = 0;
          for (int j = 0; j < kl; ++j) {
            if (s[std::size_t(j)] == -std::numeric_limits<float>::infinity()) {
              continue;
            }
            const float e = std::exp(s[std::size_t(j)] - m);
            l += e;
            const int64_t off = pr_.kv_offset(b, h / G, j);
            for (int d = 0; d < D; ++d) {
              acc[std::size_t(d)] += e * pr_.value_cache.get(std::size_t(off + d));
            }
          }
          for (int d = 0; d < D; ++d) {
            out_.out.set((std::size_t(row) * H + h) * D + d,
                         l > 0 ? acc[std::size_t(d)] / l : 0.0f);
          }
          out_.lse[std::size_t(row) * H + h] =
              l > 0 ? m + std::log(l) : -std::numeric_limits<float>::infinity();
        }
      }
    }
  }
  RunOutput download() override { return out_; }
  TimingResult time(const TimingOptions&) override {
    ++n_.timed;
    TimingResult t;
    t.median_s = t.min_s = t.max_s = t.p25_s = t.p75_s = formula_seconds(pr_, cfg_);
    t.reps = 1;
    t.converged = true;
    t.method = "synthetic formula (test double)";
    return t;
  }

private:
  const Problem& pr_;
  KernelConfig cfg_;
  Counters& n_;
  RunOutput out_;
};

class FormulaBackend : public Backend {
public:
  FormulaBackend() {
    info_.backend = "test";
    info_.id = "test";
    info_.name = "formula test double";
    info_.sm_count = kSm;
    info_.threads = 1;
  }
  const DeviceInfo& info() const override { return info_; }
  const KernelSetDecl& declaration() const override {
    static const KernelSetDecl decl{
        "formula",
        MemoryKind::host,
        {{Family::decode_v1, KvLayout::HND, true, {}},
         {Family::decode_v2,
          KvLayout::HND,
          true,
          {{"partition", {16, 32, 24}}, {"broken", {0, 1}}}},
         {Family::prefill, KvLayout::HND, true, {{"q_tile", {16, 32}}}}},
        /*engine_rule=*/""};
    return decl;
  }
  // Its own list: a broken variant of one partition only, which no product of values gives.
  std::vector<KernelConfig> config_space(Family f, const AttnParams& p) const override {
    if (f == Family::decode_v1) {
      return {{Family::decode_v1, {}}};
    }
    if (f == Family::decode_v2) {
      return {{Family::decode_v2, {{"partition", 16}}},
              {Family::decode_v2, {{"partition", 32}}},
              {Family::decode_v2, {{"partition", 24}}},
              {Family::decode_v2, {{"partition", 32}, {"broken", 1}}}};
    }
    return {{Family::prefill, {{"q_tile", 16}}}, {Family::prefill, {{"q_tile", 32}}}};
  }
  std::optional<std::string> refuse(const KernelConfig& c, const Problem& pr) const override {
    const int part = c.get("partition", pr.params.block_size);
    if (c.family == Family::decode_v2 && part % pr.params.block_size != 0) {
      return "partition " + std::to_string(part) + " is not a multiple of block_size " +
             std::to_string(pr.params.block_size);
    }
    return std::nullopt;
  }
  std::unique_ptr<PreparedRun> make_run(const Problem& pr, const KernelConfig& c,
                                        const FamilyDecl&) override {
    if (fail_prefill && c.family == Family::prefill) {
      throw std::runtime_error("transient failure (test double)");
    }
    ++n.prepared;
    return std::make_unique<FormulaRun>(pr, c, n);
  }
  // Each distinct configuration stands for one kernel to compile; the call is recorded with
  // what had happened before it.
  void prepare_plan(const std::vector<PlanItem>& plan,
                    const std::function<void(int, int)>& progress) override {
    plan_calls.push_back({int(plan.size()), n.prepared, n.timed});
    std::set<std::string> kernels;
    for (const auto& item : plan) {
      kernels.insert(item.config.key());
    }
    for (int i = 0; i <= int(kernels.size()); ++i) {
      progress(i, int(kernels.size()));
    }
  }
  struct PlanCall {
    int items = 0;
    int prepared_before = 0;
    int timed_before = 0;
  };
  std::vector<PlanCall> plan_calls;
  Counters n;
  bool fail_prefill = false; // prepare throws for every prefill configuration: an `error`

private:
  DeviceInfo info_;
};

const char* kProfile = R"({
  "name": "formula",
  "decode": {"batch": [1, 4], "context_len": [16, 48, 300], "num_kv_heads": [1, 2],
             "gqa_ratio": [2], "head_dim": [16], "block_size": [16], "dtype": ["fp32"]},
  "prefill": {"batch": [1], "q_len": [8, 40], "k_len": [40], "num_kv_heads": [1],
              "num_heads": [2], "head_dim": [16], "block_size": [16], "dtype": ["fp32"]},
  "validation": {"max_reference_work": 1e9, "min_rows": 2},
  "held_out": [{"batch": 2, "context_len": 100, "num_kv_heads": 2}]
})";

std::vector<std::string> lines_of(const fs::path& f) {
  std::ifstream in(f);
  std::vector<std::string> out;
  std::string l;
  while (std::getline(in, l)) {
    out.push_back(l);
  }
  return out;
}

json without_date(json t) {
  t["provenance"].erase("created_utc");
  return t;
}

TEST(Sweep, RecordsEveryMeasurementAndBuildsTheTable) {
  const Profile prof = parse_profile(json::parse(kProfile), "profile formula");
  FormulaBackend be;
  SweepOptions o;
  o.out_dir = test::fresh_path("sweep_full").string();
  const SweepSummary s = run_sweep(be, prof, o);
  // 12 grid + 1 held-out decode workloads x 5 configs, 2 prefill workloads (q <= k) x 2.
  EXPECT_EQ(s.total, 13 * 5 + 2 * 2);
  EXPECT_EQ(s.skipped, 13); // partition 24 with block_size 16
  EXPECT_EQ(s.failed, 13);  // the broken configuration
  EXPECT_EQ(s.ok, 13 * 3 + 4);
  EXPECT_EQ(s.errors, 0);
  EXPECT_EQ(be.n.timed, s.ok) << "failed configurations must not be timed";

  const auto lines = lines_of(s.results_path);
  ASSERT_EQ(int(lines.size()), 1 + s.total);
  EXPECT_EQ(json::parse(lines[0])["type"], "header");
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const json j = json::parse(lines[i]);
    if (j["config_key"] == "decode_v2[broken=1,partition=32]") {
      EXPECT_EQ(j["status"], "failed");
      EXPECT_FALSE(j["check"]["pass"].get<bool>());
      EXPECT_FALSE(j.contains("timing"));
    }
    if (j["config_key"] == "decode_v2[partition=24]") {
      EXPECT_EQ(j["status"], "skipped");
      EXPECT_NE(j["reason"].get<std::string>().find("not a multiple of block_size"),
                std::string::npos);
    }
  }

  // The table on disk is the one returned, and its crossovers follow the formula:
  // batch 1, kvh 1: v1 = ctx, v2(16) = ceil(ctx/16/8)*16 + 2 -> v1 at 16, v2 at 48; the two
  // cross at 18 (v2 is 18 up to 128 keys), which is where log(v2 / v1) between 16 and 48 crosses
  // zero: the table switches there.
  const json t = json::parse(std::ifstream(s.table_path));
  EXPECT_EQ(without_date(t), without_date(s.table));
  EXPECT_NO_THROW(validate_table(t));
  ASSERT_EQ(t["decode"].size(), 4u); // (batch, kvh) shape points
  for (const auto& p : t["decode"]) {
    if (p["batch"] == 1 && p["num_kv_heads"] == 1) {
      EXPECT_EQ(p["v2_intervals"], json::parse("[[18, null]]"));
      EXPECT_EQ(p.value("v2_from", json()), 18);
      EXPECT_EQ(p["measured"][0]["best"]["config"]["key"], "decode_v1[]");
      EXPECT_EQ(p["measured"][2]["best"]["config"]["key"], "decode_v2[partition=16]");
    }
  }
  EXPECT_EQ(t["held_out"].size(), 1u);
  EXPECT_EQ(t["prefill"].size(), 2u);
  EXPECT_EQ(t["prefill"][0]["best"]["config"]["key"], "prefill[q_tile=32]");
  EXPECT_EQ(t["regret"]["held_out"]["vllm_cuda"]["points"], 1);
  EXPECT_EQ(t["rule"]["points"], 12);
  EXPECT_EQ(t["provenance"]["profile"]["name"], "formula");
  EXPECT_EQ(t["provenance"]["timing_method"], "synthetic formula (test double)");
  EXPECT_EQ(t["provenance"]["kernel_sources_sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(t["provenance"]["kernels"]["source_files"], builtin_kernel_source_files());
  fs::remove_all(o.out_dir);
}

// The built-in kernels' hash is over the files the table names, "path:sha256\n" each: the CUDA
// kernels and the CPU backend's (before 2026-12-07 it covered kernels/ alone, so a CPU table's
// hash did not change with the CPU kernels it timed).
TEST(Sweep, TheKernelSourcesHashIsOverTheFilesItNames) {
  std::string lines;
  std::set<std::string> named;
  for (const json& f : builtin_kernel_source_files()) {
    const std::string path = f.get<std::string>();
    named.insert(path);
    lines += path + ":" + sha256_file(std::string(ATTN_SOURCE_DIR) + "/" + path) + "\n";
  }
  for (const char* want :
       {"kernels/decode.cuh", "kernels/prefill.cuh", "src/backends/cpu/cpu_kernels.cpp",
        "src/backends/cpu/cpu_plan.cpp", "src/backends/cuda/decode_launch.cpp"}) {
    EXPECT_EQ(named.count(want), 1u) << want;
  }
  EXPECT_EQ(sha256_hex(lines), generated::kKernelSourcesSha256);
}

TEST(Sweep, CompilesThePlanBeforeTheFirstTiming) {
  const Profile prof = parse_profile(json::parse(kProfile), "profile formula");
  FormulaBackend be;
  SweepOptions o;
  o.out_dir = test::fresh_path("sweep_plan").string();
  FILE* log = std::tmpfile();
  ASSERT_NE(log, nullptr);
  o.progress = log;
  const SweepSummary s = run_sweep(be, prof, o);
  ASSERT_EQ(be.plan_calls.size(), 1u);
  EXPECT_EQ(be.plan_calls[0].items, s.total);
  EXPECT_EQ(be.plan_calls[0].prepared_before, 0);
  EXPECT_EQ(be.plan_calls[0].timed_before, 0);
  EXPECT_GT(be.n.timed, 0);
  std::rewind(log);
  std::string text;
  for (int c = std::fgetc(log); c != EOF; c = std::fgetc(log)) {
    text += char(c);
  }
  std::fclose(log);
  // v1, four v2 and two prefill configurations: seven kernels, reported from 0 to 7.
  EXPECT_NE(text.find("compiling 7 kernels: 0/7\n"), std::string::npos) << text;
  EXPECT_NE(text.find("compiling 7 kernels: 7/7\n"), std::string::npos) << text;
  EXPECT_LT(text.find("compiling 7 kernels: 7/7"), text.find("decode")) << text;
  // The provenance says how it was timed; a backend without clocks records none.
  const json& prov = s.table["provenance"];
  EXPECT_EQ(prov["timing_mode"], "events");
  EXPECT_EQ(prov["timing_options"]["mode"], "events");
  EXPECT_DOUBLE_EQ(prov["timing_options"]["warmup_seconds"].get<double>(),
                   TimingOptions{}.warmup_seconds);
  EXPECT_EQ(prov["clocks"], "not recorded");
  // Resumed with nothing left to measure: nothing to compile either.
  FormulaBackend again;
  o.resume = true;
  o.progress = nullptr;
  (void)run_sweep(again, prof, o);
  EXPECT_TRUE(again.plan_calls.empty());
  fs::remove_all(o.out_dir);
}

TEST(Sweep, KilledAndResumedSweepGivesTheCompleteTable) {
  const Profile prof = parse_profile(json::parse(kProfile), "profile formula");
  FormulaBackend full_be;
  SweepOptions full;
  full.out_dir = test::fresh_path("sweep_ref").string();
  const SweepSummary ref = run_sweep(full_be, prof, full);

  // A sweep killed mid-write: keep the first 40% of the lines and half of the next line.
  const fs::path dir = test::fresh_path("sweep_resumed");
  fs::create_directories(dir);
  const auto lines = lines_of(ref.results_path);
  const std::size_t keep = lines.size() * 2 / 5;
  {
    std::ofstream f(dir / "results.jsonl", std::ios::binary);
    for (std::size_t i = 0; i < keep; ++i) {
      f << lines[i] << "\n";
    }
    f << lines[keep].substr(0, lines[keep].size() / 2); // no newline: the line in flight
  }
  FormulaBackend be;
  SweepOptions o;
  o.out_dir = dir.string();
  o.resume = true;
  const SweepSummary s = run_sweep(be, prof, o);
  EXPECT_EQ(s.resumed, int(keep) - 1); // the header is not a measurement
  EXPECT_EQ(s.resumed + s.ok + s.failed + s.skipped + s.errors, s.total);
  EXPECT_EQ(be.n.timed, s.ok);
  const auto after = lines_of(s.results_path);
  ASSERT_EQ(after.size(), lines.size());
  for (const auto& l : after) {
    EXPECT_NO_THROW({ const json j = json::parse(l); }) << l;
  }
  EXPECT_EQ(without_date(s.table), without_date(ref.table));

  // Resuming a complete sweep measures nothing and rebuilds the same table.
  FormulaBackend idle;
  const SweepSummary again = run_sweep(idle, prof, o);
  EXPECT_EQ(again.resumed, again.total);
  EXPECT_EQ(idle.n.prepared, 0);
  EXPECT_EQ(without_date(again.table), without_date(ref.table));
  fs::remove_all(dir);
  fs::remove_all(full.out_dir);
}

// A second sweep into a folder that a running sweep holds stops at once, before it reads or
// writes anything there, and names the holder; the first sweep's results stay as they were.
TEST(Sweep, SecondSweepIntoAHeldFolderIsRefused) {
  const Profile prof = parse_profile(json::parse(kProfile), "profile formula");
  FormulaBackend be;
  SweepOptions o;
  o.out_dir = test::fresh_path("sweep_held").string();
  (void)run_sweep(be, prof, o);
  const fs::path results = fs::path(o.out_dir) / "results.jsonl";
  const auto size = fs::file_size(results);
  const FolderLock running(o.out_dir); // stands for a sweep still running there
  o.resume = true;
  try {
    (void)run_sweep(be, prof, o);
    FAIL() << "a held folder must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("in use by another attn-tune process (pid "),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(fs::file_size(results), size);
  fs::remove_all(o.out_dir);
}

// A configuration that ended in an error is retried by --resume once, not forever, and the
// table counts the retry's outcome in place of the error.
TEST(Sweep, ResumeRetriesErrorsOnce) {
  const Profile prof = parse_profile(json::parse(kProfile), "profile formula");
  FormulaBackend be;
  be.fail_prefill = true;
  SweepOptions o;
  o.out_dir = test::fresh_path("sweep_retry").string();
  const SweepSummary first = run_sweep(be, prof, o);
  ASSERT_GT(first.errors, 0);
  const int errors = first.errors;
  EXPECT_EQ(first.table["measurement_counts"].value("error", 0), errors);

  o.resume = true;
  const SweepSummary second = run_sweep(be, prof, o); // still failing: retried once
  EXPECT_EQ(second.resumed, first.total - errors);
  EXPECT_EQ(second.errors, errors);
  const SweepSummary third = run_sweep(be, prof, o); // failed twice: left alone
  EXPECT_EQ(third.resumed, first.total);
  EXPECT_EQ(third.errors, 0);
  EXPECT_EQ(third.table["measurement_counts"].value("error", 0), errors);

  // A transient error that a retry fixes leaves no error in the table.
  fs::remove_all(o.out_dir);
  o.resume = false;
  (void)run_sweep(be, prof, o);
  be.fail_prefill = false;
  o.resume = true;
  const SweepSummary fixed = run_sweep(be, prof, o);
  EXPECT_EQ(fixed.ok, errors);
  EXPECT_EQ(fixed.table["measurement_counts"].value("error", 0), 0);
  EXPECT_EQ(fixed.table["measurement_counts"].value("ok", 0) +
                fixed.table["measurement_counts"].value("failed", 0) +
                fixed.table["measurement_counts"].value("skipped", 0),
            fixed.total);
  fs::remove_all(o.out_dir);
}

TEST(Sweep, RefusesToMixSweeps) {
  const Profile prof = parse_profile(json::parse(kProfile), "profile formula");
  FormulaBackend be;
  SweepOptions o;
  o.out_dir = test::fresh_path("sweep_mix").string();
  (void)run_sweep(be, prof, o);
  // Without --resume an existing results file is not appended to.
  EXPECT_THROW((void)run_sweep(be, prof, o), InputError);
  // --resume with another profile, seed or timing mode is refused.
  json other = json::parse(kProfile);
  other["decode"]["batch"] = {1};
  o.resume = true;
  try {
    (void)run_sweep(be, parse_profile(other, "profile other"), o);
    FAIL() << "a different profile must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("same profile"), std::string::npos) << e.what();
  }
  o.seed = 7;
  EXPECT_THROW((void)run_sweep(be, prof, o), InputError);
  // Nor with another timing mode: event and graph timings must not share a table.
  o.seed = 1;
  Profile graph = prof;
  graph.timing.mode = TimingMode::graph;
  try {
    (void)run_sweep(be, graph, o);
    FAIL() << "a different timing mode must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("same timing mode"), std::string::npos) << e.what();
  }
  // A line of another sweep pasted into the file (its header matching): a configuration the
  // kernels do not offer, a workload not in the plan, another seed's data. Each is refused on
  // --resume, naming the line, and the file is left as it is.
  const fs::path results = fs::path(o.out_dir) / "results.jsonl";
  const ResultsFile clean = read_results(results.string());
  ASSERT_FALSE(clean.lines.empty());
  const auto resume_with = [&](const std::function<void(json&)>& edit, const std::string& said) {
    json l = clean.lines.front();
    edit(l);
    std::ofstream(results, std::ios::app) << l.dump() << "\n";
    try {
      (void)run_sweep(be, prof, o);
      ADD_FAILURE() << "a foreign line was taken: " << l.dump();
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(said), std::string::npos) << e.what();
    }
    std::ofstream out(results, std::ios::trunc);
    out << clean.header.dump() << "\n";
    for (const json& line : clean.lines) {
      out << line.dump() << "\n";
    }
  };
  // (Keys and fields edited together: a key that does not match its fields is damage, refused
  // by the reader.)
  resume_with(
      [](json& l) {
        KernelConfig c = KernelConfig::from_json(l["config"]);
        c.params["unheard_of"] = 3;
        l["config"] = c.to_json();
        l["config_key"] = c.key();
      },
      "names a configuration these kernels do not offer");
  resume_with(
      [](json& l) {
        const std::string key = l.value("workload_key", "");
        const std::string b = "b=" + std::to_string(l["workload"].value("batch", 0)) + " ";
        l["workload"]["batch"] = 97;
        l["workload_key"] =
            key.substr(0, key.find(b)) + "b=97 " + key.substr(key.find(b) + b.size());
      },
      "is no workload of this folder's plan");
  resume_with([](json& l) { l["seed"] = 12345; }, "was measured on data of seed 12345");
  EXPECT_NO_THROW((void)run_sweep(be, prof, o)); // the file as it was resumes
  fs::remove_all(o.out_dir);
}

// The formula profile with six lengths: enough for the adaptive search to race and bisect.
Profile adaptive_profile() {
  json pj = json::parse(kProfile);
  pj["decode"]["context_len"] = {16, 32, 48, 64, 128, 300};
  return parse_profile(pj, "profile formula");
}

// sweep --search adaptive on the test double: fewer measurements than the plan, each line saying
// its stage and why, a search_end line, the exhaustive sweep's switch, and the same table again
// after a kill and a resume that keeps the folder's search (and refuses the other one).
TEST(Sweep, AdaptiveSearchMeasuresLessAndResumesToTheSameTable) {
  const Profile prof = adaptive_profile();
  FormulaBackend ex_be;
  SweepOptions ex;
  ex.out_dir = test::fresh_path("sweep_adaptive_ex").string();
  const SweepSummary exhaustive = run_sweep(ex_be, prof, ex);
  FormulaBackend be;
  SweepOptions o;
  o.out_dir = test::fresh_path("sweep_adaptive").string();
  o.search = SearchMode::adaptive;
  const SweepSummary s = run_sweep(be, prof, o);
  EXPECT_EQ(s.search, SearchMode::adaptive);
  EXPECT_NO_THROW(validate_table(s.table)); // its search fields keep it a valid table
  const json& sp = s.table["provenance"]["search"];
  EXPECT_EQ(sp["mode"], "adaptive");
  EXPECT_EQ(sp["exhaustive_measurements"], exhaustive.total);
  EXPECT_LT(sp["measurements"].get<int>(), exhaustive.total);
  const auto lines = lines_of(s.results_path);
  EXPECT_EQ(json::parse(lines.back())["type"], "search_end");
  EXPECT_EQ(json::parse(lines.front())["search"]["mode"], "adaptive");
  for (std::size_t i = 1; i + 1 < lines.size(); ++i) {
    const json j = json::parse(lines[i]);
    ASSERT_TRUE(j.contains("search")) << lines[i];
    EXPECT_FALSE(j["search"]["why"].get<std::string>().empty());
    if (j["workload"]["phase"] == "decode" && !j["workload"].value("held_out", false)) {
      EXPECT_EQ(j["search"]["grid"], json::parse("[16, 32, 48, 64, 128, 300]"));
    }
  }
  // The switch of batch 1, kvh 1 (v1 at 16, v2 from 32 on the formula) is where the exhaustive
  // sweep put it.
  for (const json& p : s.table["decode"]) {
    for (const json& q : exhaustive.table["decode"]) {
      if (p["batch"] == q["batch"] && p["num_kv_heads"] == q["num_kv_heads"]) {
        EXPECT_EQ(p["v2_intervals"], q["v2_intervals"]) << p.dump();
      }
    }
    EXPECT_TRUE(p.contains("search"));
  }

  // Killed after 40% of its lines: the resumed search (no --search: the folder's) finishes with
  // the same table.
  const fs::path dir = test::fresh_path("sweep_adaptive_resumed");
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "results.jsonl", std::ios::binary);
    for (std::size_t i = 0; i < lines.size() * 2 / 5; ++i) {
      f << lines[i] << "\n";
    }
  }
  FormulaBackend again_be;
  SweepOptions r;
  r.out_dir = dir.string();
  r.resume = true;
  const SweepSummary resumed = run_sweep(again_be, prof, r);
  EXPECT_EQ(resumed.search, SearchMode::adaptive);
  json a = without_date(resumed.table);
  json b = without_date(s.table);
  EXPECT_EQ(a["decode"], b["decode"]);
  EXPECT_EQ(a["provenance"]["search"], b["provenance"]["search"]);
  // Resumed once more with nothing left to measure: the file still ends in one search_end line.
  const auto count_ends = [&] {
    int n = 0;
    for (const std::string& l : lines_of((dir / "results.jsonl").string())) {
      n += json::parse(l).value("type", "") == "search_end";
    }
    return n;
  };
  EXPECT_EQ(count_ends(), 1);
  FormulaBackend done_be;
  (void)run_sweep(done_be, prof, r);
  EXPECT_EQ(count_ends(), 1);
  r.search = SearchMode::exhaustive;
  try {
    (void)run_sweep(again_be, prof, r);
    FAIL() << "an adaptive folder resumed exhaustively must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("same search"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
  fs::remove_all(o.out_dir);
  fs::remove_all(ex.out_dir);
}

// Killed between any two lines, the resumed adaptive search measures what the unstopped one did,
// in the same order and stages. Stopped between the race and the full timings of one point, it
// used to ask the search for its next point with that point half measured: a finished neighbour
// took it for measured and raced again (an audit, 2026-12-06).
TEST(Sweep, AnAdaptiveSearchStoppedAnywhereResumesToTheSameRuns) {
  const Profile prof = adaptive_profile();
  FormulaBackend be;
  SweepOptions o;
  o.out_dir = test::fresh_path("sweep_adaptive_whole").string();
  o.search = SearchMode::adaptive;
  const SweepSummary whole = run_sweep(be, prof, o);
  const auto runs_of = [](const std::vector<std::string>& lines) {
    std::vector<std::string> runs;
    for (const std::string& l : lines) {
      const json j = json::parse(l);
      if (j.contains("workload_key")) {
        runs.push_back(j["workload_key"].get<std::string>() + " " +
                       j["config_key"].get<std::string>() + " " +
                       j["search"]["stage"].get<std::string>());
      }
    }
    return runs;
  };
  const std::vector<std::string> lines = lines_of(whole.results_path);
  const std::vector<std::string> want = runs_of(lines);
  int races = 0;
  for (const std::string& r : want) {
    races += r.ends_with(" race");
  }
  ASSERT_GT(races, 0); // the profile makes the search race, so some cuts fall inside a point
  bool twice_checked = false;
  for (std::size_t cut = 1; cut + 1 < lines.size(); ++cut) { // after the header, before the end
    const fs::path dir = test::fresh_path("sweep_adaptive_cut");
    fs::create_directories(dir);
    {
      std::ofstream f(dir / "results.jsonl", std::ios::binary);
      for (std::size_t i = 0; i < cut; ++i) {
        f << lines[i] << "\n";
      }
    }
    FormulaBackend again;
    SweepOptions r;
    r.out_dir = dir.string();
    r.resume = true;
    (void)run_sweep(again, prof, r);
    const std::vector<std::string> resumed = lines_of((dir / "results.jsonl").string());
    EXPECT_EQ(runs_of(resumed), want) << "cut after " << cut;
    // Stopped again one line into the point it resumed: the point keeps its reason, with the
    // resume said once.
    const auto workload_of = [](const std::string& l) {
      const json j = json::parse(l);
      return j.value("workload_key", std::string());
    };
    if (!twice_checked && cut + 2 < resumed.size() &&
        workload_of(resumed[cut]) == workload_of(resumed[cut + 1]) &&
        workload_of(resumed[cut]) == workload_of(resumed[cut - 1])) {
      twice_checked = true;
      {
        std::ofstream f(dir / "results.jsonl", std::ios::binary | std::ios::trunc);
        for (std::size_t i = 0; i <= cut; ++i) {
          f << resumed[i] << "\n";
        }
      }
      FormulaBackend third;
      (void)run_sweep(third, prof, r);
      const std::string why =
          json::parse(lines_of((dir / "results.jsonl").string())[cut + 1])["search"]["why"];
      const std::size_t first = why.find("(resumed: ");
      EXPECT_NE(first, std::string::npos) << why;
      EXPECT_EQ(why.find("(resumed: ", first + 1), std::string::npos) << why;
    }
    fs::remove_all(dir);
  }
  EXPECT_TRUE(twice_checked);
  fs::remove_all(o.out_dir);
}

// The real thing: the quick profile on the CPU backend, once that backend is built in.
TEST(Sweep, QuickProfileEndToEndOnTheCpuBackend) {
  std::unique_ptr<Backend> be;
  try {
    be = make_backend("cpu", {.threads = 2, .kernels = ""});
  } catch (const DeviceUnavailable& e) {
    GTEST_SKIP() << "no CPU backend in this build: " << e.what();
  }
  Profile prof = load_profile("quick");
  // The quick profile's grid with short timing: what is checked here is that the table follows
  // the measurements, not the measurements (cli.sweep_quick_cpu runs the profile as it ships).
  prof.timing.warmup = 1;
  prof.timing.warmup_seconds = 0.0;
  prof.timing.min_reps = 3;
  prof.timing.max_reps = 10;
  prof.timing.max_seconds = 0.02;
  prof.timing.flush_cache = false;
  SweepOptions o;
  o.out_dir = test::fresh_path("sweep_cpu_quick").string();
  o.reference_threads = 2;
  const SweepSummary s = run_sweep(*be, prof, o);
  EXPECT_EQ(s.failed, 0);
  EXPECT_EQ(s.errors, 0);
  EXPECT_GT(s.ok, 0);
  const json t = json::parse(std::ifstream(s.table_path));
  EXPECT_NO_THROW(validate_table(t));
  const attn_tune::ThresholdTableReader reader(t);
  ASSERT_FALSE(t["decode"].empty());
  // Lookup agrees with the measurements at every measured point: the family follows the
  // crossover, the configuration is that family's best at that context length, and it costs no
  // more than the measured noise there.
  for (const auto& p : t["decode"]) {
    for (const auto& m : p["measured"]) {
      attn_tune::Query q;
      q.batch = p["batch"];
      q.context_len = m["context_len"];
      q.num_heads = p["num_heads"];
      q.num_kv_heads = p["num_kv_heads"];
      q.head_dim = p["head_dim"];
      q.block_size = p["block_size"];
      q.dtype = p["dtype"];
      const auto c = reader.lookup(q);
      EXPECT_TRUE(c.exact_point);
      const bool v2 = attn_tune::ThresholdTableReader::uses_v2(p, reader.version(), q.context_len);
      const char* slot = v2 ? "v2" : "v1";
      if (!m[slot].is_null()) {
        EXPECT_EQ(c.family, v2 ? "decode_v2" : "decode_v1");
        EXPECT_EQ(c.config_key, m[slot]["config"]["key"]);
        const double regret =
            m[slot]["median_s"].get<double>() / m["best"]["median_s"].get<double>() - 1;
        EXPECT_LE(regret, m.value("noise", 0.0) * (1 + 1e-9) + 1e-12) << "ctx " << q.context_len;
      }
    }
  }
  EXPECT_EQ(t["regret"]["sweep"]["table_lookup"]["beyond_noise"], 0);
  fs::remove_all(o.out_dir);
}

} // namespace
} // namespace attn
