// The verify command: a correct backend passes, and a planted fault (a test-only backend that
// corrupts one output element) is caught, reported, dumped and replayed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "reference/reference.h"
#include "src/backends/registry.h"
#include "src/cli/verify_command.h"
#include "src/validation/check.h"
#include "src/validation/replay.h"
#include "src/validation/verify.h"
#include "tests/support/files.h"

using namespace attn;

namespace {

// Wraps a real backend and flips one output element of every decode_v2 run: the kind of bug a
// wrong partition bound produces. Exists only in this test.
class FaultyRun : public PreparedRun {
public:
  explicit FaultyRun(std::unique_ptr<PreparedRun> inner) : inner_(std::move(inner)) {}
  void poison_outputs() override { inner_->poison_outputs(); }
  void run() override { inner_->run(); }
  RunOutput download() override {
    RunOutput o = inner_->download();
    if (o.out.numel() > 5) {
      o.out.set(5, o.out.get(5) + 0.75f);
    }
    return o;
  }
  TimingResult time(const TimingOptions& opt) override { return inner_->time(opt); }

private:
  std::unique_ptr<PreparedRun> inner_;
};

class FaultyBackend : public Backend {
public:
  explicit FaultyBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  const DeviceInfo& info() const override { return inner_->info(); }
  const KernelSetDecl& declaration() const override { return inner_->declaration(); }
  std::vector<KernelConfig> config_space(Family f, const AttnParams& p) const override {
    return inner_->config_space(f, p);
  }
  std::optional<std::string> can_run(const KernelConfig& c, const Problem& p) const override {
    return inner_->can_run(c, p);
  }
  std::unique_ptr<PreparedRun> prepare(const Problem& p, const KernelConfig& c) override {
    auto run = inner_->prepare(p, c);
    if (c.family == Family::decode_v2) {
      return std::make_unique<FaultyRun>(std::move(run));
    }
    return run;
  }

protected:
  // Never reached: can_run and prepare above go to the wrapped backend.
  std::optional<std::string> refuse(const KernelConfig& c, const Problem& p) const override {
    return inner_->can_run(c, p);
  }
  std::unique_ptr<PreparedRun> make_run(const Problem& p, const KernelConfig& c,
                                        const FamilyDecl&) override {
    return prepare(p, c);
  }

private:
  std::unique_ptr<Backend> inner_;
};

} // namespace

TEST(Verify, CpuBackendPassesQuickDecode) {
  cli::VerifyOptions o;
  o.device = "cpu";
  o.families = "decode_v1,decode_v2";
  o.dtypes = "fp16";
  o.intensity = "quick";
  std::FILE* out = std::tmpfile();
  const int rc = cli::run_verify(o, make_backend, out, stderr);
  const std::string text = test::drain(out);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find(" passed, 0 failed"), std::string::npos) << text;
}

TEST(Verify, PlantedFaultIsCaughtReportedDumpedAndReplayed) {
  const auto dir = test::fresh_dir("verify_fault");
  cli::VerifyOptions o;
  o.device = "cpu";
  o.families = "decode_v1,decode_v2";
  o.dtypes = "fp32";
  o.intensity = "quick";
  o.kv_dtypes = "auto"; // the fault path, not the caches
  o.seed = 99;
  o.dump_dir = (dir / "dumps").string();
  o.junit = (dir / "report.xml").string();
  auto faulty = [](const std::string& spec, const BackendOptions& bo) -> std::unique_ptr<Backend> {
    return std::make_unique<FaultyBackend>(make_backend(spec, bo));
  };
  std::FILE* out = std::tmpfile();
  const int rc = cli::run_verify(o, faulty, out, stderr);
  const std::string text = test::drain(out);
  EXPECT_EQ(rc, 1) << text;
  // One line per failing case, naming the config, the case, the seed and the first mismatch.
  EXPECT_NE(text.find("FAIL cpu decode_v2["), std::string::npos) << text;
  EXPECT_NE(text.find("run_seed=99"), std::string::npos) << text;
  EXPECT_NE(text.find("out[0,0,5]"), std::string::npos) << text;
  EXPECT_NE(text.find("reproduce: attn-tune verify --device cpu --seed 99"), std::string::npos);
  EXPECT_EQ(text.find("FAIL cpu decode_v1["), std::string::npos) << "v1 has no fault: " << text;
  EXPECT_NE(text.find(" passed, "), std::string::npos);
  // The JUnit file carries the failure text.
  const std::string xml = test::read_file(o.junit);
  EXPECT_NE(xml.find("<failure message="), std::string::npos);
  EXPECT_NE(xml.find("out[0,0,5]"), std::string::npos);
  // Every dump replays to a mismatch against the reference.
  int dumps = 0;
  for (const auto& e : std::filesystem::directory_iterator(o.dump_dir)) {
    ++dumps;
    ReplayFile rf = load_replay(e.path().string());
    ASSERT_TRUE(rf.out.has_value()) << e.path();
    const ReferenceResult ref = reference_attention(rf.problem);
    const CheckReport rep =
        check_output(*rf.out, nullptr, ref, tolerance_for(rf.problem.params.dtype));
    EXPECT_FALSE(rep.pass) << e.path();
    EXPECT_GT(rep.bad, 0) << e.path();
  }
  EXPECT_GT(dumps, 0);
  std::filesystem::remove_all(dir);
}

// A configuration that crashes its worker (the CPU backend's test hook) is a failed case whose
// line names the fault; every other configuration is still checked and the gate fails.
TEST(Verify, CrashingConfigurationIsAFailedCaseAndTheRunGoesOn) {
  ::setenv("ATTN_TUNE_TEST_FAULTS",
           "segv:decode_v1[split=1];abort:decode_v2[partition=512,split=0]", 1);
  cli::VerifyOptions o;
  o.device = "cpu";
  o.families = "decode_v1,decode_v2";
  o.dtypes = "fp32";
  o.intensity = "quick";
  o.kv_dtypes = "auto"; // the fault path, not the caches
  std::FILE* out = std::tmpfile();
  const int rc = cli::run_verify(o, make_backend, out, stderr);
  ::unsetenv("ATTN_TUNE_TEST_FAULTS");
  const std::string text = test::drain(out);
  EXPECT_EQ(rc, 1) << text;
  EXPECT_NE(text.find("FAIL cpu decode_v1[split=1] decode/edges/fp32#0"), std::string::npos)
      << text;
  EXPECT_NE(text.find(": fault: worker "), std::string::npos) << text;
  EXPECT_NE(text.find("SIGABRT"), std::string::npos) << text;
  // Only the two planted configurations fail: 8 configurations, 2 crashing, on every case.
  int passed = 0;
  int failed = 0;
  const auto at = text.rfind(" passed, ");
  ASSERT_NE(at, std::string::npos) << text;
  ASSERT_EQ(std::sscanf(text.c_str() + text.rfind('\n', at) + 1, "%d passed, %d failed", &passed,
                        &failed),
            2)
      << text;
  EXPECT_EQ(passed, 3 * failed) << text;
  EXPECT_GT(failed, 0);
}
