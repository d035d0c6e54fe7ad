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
#include "src/cli/exit_codes.h"
#include "src/cli/verify_command.h"
#include "src/validation/check.h"
#include "src/validation/replay.h"
#include "src/validation/verify.h"
#include "tests/support/files.h"

using namespace attn;

namespace {

// Wraps a real backend and flips one output element of every decode_v2 run with partitions of 512
// keys: the kind of bug a wrong partition bound produces. Two configurations of the CPU backend's
// six (split 0 and 1), so that the test diagnoses and dumps a third of the failures it did when
// every decode_v2 run was wrong (54 s of test time on 2 cores), and checks that verify blames
// those configurations alone. Exists only in this test.
constexpr int kFaultyPartition = 512;

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
    if (c.family == Family::decode_v2 && c.get("partition", 0) == kFaultyPartition) {
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
  o.threads = 2;
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
  // With the threads it ran on (a split or a race may need the same count).
  EXPECT_NE(text.find("reproduce: attn-tune verify --device cpu --threads 2 --seed 99"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("FAIL cpu decode_v1["), std::string::npos) << "v1 has no fault: " << text;
  EXPECT_NE(text.find("FAIL cpu decode_v2[partition=512,"), std::string::npos) << text;
  for (const char* clean :
       {"FAIL cpu decode_v2[partition=256,", "FAIL cpu decode_v2[partition=1024,"}) {
    EXPECT_EQ(text.find(clean), std::string::npos) << "only partition=512 has the fault: " << text;
  }
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
  const auto dir = test::fresh_dir("verify_crash");
  o.junit = (dir / "report.xml").string();
  std::FILE* out = std::tmpfile();
  const int rc = cli::run_verify(o, make_backend, out, stderr);
  ::unsetenv("ATTN_TUNE_TEST_FAULTS");
  // In JUnit, a testcase whose every failing case crashed is an <error> of type "fault", counted
  // in `errors`, not a mismatch.
  const std::string xml = test::read_file(o.junit);
  EXPECT_NE(xml.find("<error message="), std::string::npos);
  EXPECT_NE(xml.find("type=\"fault\""), std::string::npos);
  EXPECT_EQ(xml.find("type=\"mismatch\""), std::string::npos);
  EXPECT_EQ(xml.find("errors=\"0\""), std::string::npos);
  std::filesystem::remove_all(dir);
  const std::string text = test::drain(out);
  EXPECT_EQ(rc, 1) << text;
  EXPECT_NE(text.find("FAIL cpu decode_v1[split=1] decode/edges/fp32#0"), std::string::npos)
      << text;
  EXPECT_NE(text.find(": fault: worker "), std::string::npos) << text;
  EXPECT_NE(text.find("SIGABRT"), std::string::npos) << text;
  // Only the two planted configurations fail, on every case they run; the other six pass. (The
  // edge cases at block size 48 run the two decode_v1 configurations alone: no v2 partition is
  // a multiple of 48.)
  std::size_t line_at = 0;
  int fail_lines = 0;
  while ((line_at = text.find("FAIL cpu ", line_at)) != std::string::npos) {
    const std::string cfg = text.substr(line_at + 9, text.find(' ', line_at + 9) - line_at - 9);
    EXPECT_TRUE(cfg == "decode_v1[split=1]" || cfg == "decode_v2[partition=512,split=0]") << cfg;
    ++fail_lines;
    ++line_at;
  }
  int passed = 0;
  int failed = 0;
  const auto at = text.rfind(" passed, ");
  ASSERT_NE(at, std::string::npos) << text;
  ASSERT_EQ(std::sscanf(text.c_str() + text.rfind('\n', at) + 1, "%d passed, %d failed", &passed,
                        &failed),
            2)
      << text;
  EXPECT_EQ(fail_lines, failed) << text;
  EXPECT_GT(failed, 0);
  EXPECT_GT(passed, 2 * failed) << text;
}

// Whatever an error message carries (a file's tensor name, an environment variable) it is printed
// as one line: control characters and bytes that are not UTF-8 escaped, the length capped.
TEST(ExitCodes, ErrorMessagesAreOneLine) {
  EXPECT_EQ(cli::one_line("tensor 'a\nattn-tune: fake'"), "tensor 'a\\x0aattn-tune: fake'");
  EXPECT_EQ(cli::one_line("esc \x1b[31mred"), "esc \\x1b[31mred");
  EXPECT_EQ(cli::one_line("caf\xc3\xa9 ok, bad \xbe byte"), "caf\xc3\xa9 ok, bad \\xbe byte");
  EXPECT_EQ(cli::one_line("cut \xe2\x82"), "cut \\xe2\\x82");
  const std::string longer = cli::one_line(std::string(100000, 'x'));
  EXPECT_LE(longer.size(), 2010u);
  EXPECT_NE(longer.find("..."), std::string::npos);
  // Cut from the middle: the reason after a very long path survives.
  const std::string path_and_reason = cli::one_line(
      "cannot create a file next to " + std::string(5000, 'd') + ": File name too long");
  EXPECT_LE(path_and_reason.size(), 2010u);
  EXPECT_TRUE(path_and_reason.starts_with("cannot create a file next to ddd"));
  EXPECT_TRUE(path_and_reason.ends_with("ddd: File name too long")) << path_and_reason;
  // A multibyte character at the cut is kept whole or left out, never split.
  std::string accents;
  for (int i = 0; i < 3001; ++i) {
    accents += "\xc3\xa9";
  }
  const std::string wide = cli::one_line(accents);
  for (std::size_t i = 0; i < wide.size(); ++i) {
    if (wide[i] == '\xc3') {
      EXPECT_TRUE(i + 1 < wide.size() && wide[i + 1] == '\xa9') << "split at " << i;
    } else if (wide[i] == '\xa9') {
      EXPECT_TRUE(i > 0 && wide[i - 1] == '\xc3') << "split at " << i;
    }
  }
}
