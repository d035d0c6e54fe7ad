// The checked run on the CPU backend: each outcome (passed and timed, failed with its figures,
// skipped with can_run's reason, error, fault) from the run itself and through a supervised
// session, and the reference computed once per subject as a phase outside any run's fault unit.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "src/backends/cpu/cpu_backend.h"
#include "src/model/problem_gen.h"
#include "src/validation/checked_run.h"
#include "tests/support/crash_reason.h"

namespace attn {
namespace {

Problem small_decode(uint64_t seed = 3) {
  AttnParams p;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = 32;
  p.block_size = 16;
  p.dtype = DType::f32;
  GenOptions g;
  g.seed = seed;
  return make_decode_problem(p, {5, 40, 300}, g);
}

// Records what a worker would send, in order.
struct Recorder {
  std::vector<WorkerMessage> sent;
  std::set<std::string> finished;
  WorkerLink link() {
    return WorkerLink([this](const WorkerMessage& m) { sent.push_back(m); }, finished);
  }
};

RunIdentity run_of(const KernelConfig& c) { return {c.key(), c, {{"what", "test"}}}; }

// Wraps a backend and adds 0.75 to one output element, or throws in prepare: a wrong kernel and a
// kernel that cannot run, with everything else the wrapped backend's.
class Broken : public Backend {
public:
  Broken(std::unique_ptr<Backend> inner, bool throws) : inner_(std::move(inner)), throws_(throws) {}
  const DeviceInfo& info() const override { return inner_->info(); }
  const KernelSetDecl& declaration() const override { return inner_->declaration(); }

protected:
  std::optional<std::string> refuse(const KernelConfig& c, const Problem& p) const override {
    return inner_->can_run(c, p);
  }
  std::unique_ptr<PreparedRun> make_run(const Problem& p, const KernelConfig& c,
                                        const FamilyDecl&) override {
    if (throws_) {
      throw std::runtime_error("no such kernel today");
    }
    class Off : public PreparedRun {
    public:
      explicit Off(std::unique_ptr<PreparedRun> r) : r_(std::move(r)) {}
      void poison_outputs() override { r_->poison_outputs(); }
      void run() override { r_->run(); }
      RunOutput download() override {
        RunOutput o = r_->download();
        o.out.set(5, o.out.get(5) + 0.75f);
        return o;
      }
      TimingResult time(const TimingOptions& opt) override { return r_->time(opt); }

    private:
      std::unique_ptr<PreparedRun> r_;
    };
    return std::make_unique<Off>(inner_->prepare(p, c));
  }

private:
  std::unique_ptr<Backend> inner_;
  bool throws_;
};

TimingOptions quick_timing() {
  TimingOptions t;
  t.warmup = 1;
  t.warmup_seconds = 0.0;
  t.min_reps = 3;
  t.max_reps = 3;
  t.max_seconds = 0.05;
  return t;
}

TEST(CheckedRun, PassesThenTimesOnlyWhenAsked) {
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  CheckSubject subject("decode", small_decode());
  Recorder rec;
  const KernelConfig cfg{Family::decode_v2, {{"partition", 256}, {"split", 1}}};
  RunOutput out;
  const CheckedRunResult checked = checked_run(rec.link(), *be, subject, run_of(cfg), {}, &out);
  EXPECT_EQ(checked.status, RunStatus::passed) << checked.reason;
  ASSERT_TRUE(checked.check.has_value());
  EXPECT_TRUE(checked.check->report.pass);
  EXPECT_EQ(checked.check->rows_checked, 3);
  EXPECT_EQ(checked.check->rows_total, 3);
  EXPECT_TRUE(checked.check->lse_checked);
  EXPECT_FALSE(checked.timing.has_value());
  EXPECT_EQ(out.out.numel(), int64_t(3) * 4 * 32);

  RunRequest timed;
  timed.timing = quick_timing();
  const CheckedRunResult t = checked_run(rec.link(), *be, subject, run_of(cfg), timed);
  EXPECT_EQ(t.status, RunStatus::passed);
  ASSERT_TRUE(t.timing.has_value());
  EXPECT_EQ(t.timing->reps, 3);
  EXPECT_GT(t.timing->median_s, 0.0);
}

// A subject in another layout than the kernel set reads is rearranged once and the copy kept for
// every configuration; in its own layout it is handed over as it is.
TEST(CheckedRun, ASubjectIsRearrangedOnceForAKernelSetThatReadsAnotherLayout) {
  Problem nhd = with_kv_layout(small_decode(), KvLayout::NHD);
  CheckSubject subject("decode nhd", nhd);
  EXPECT_EQ(&subject.problem_in(KvLayout::NHD), &subject.problem());
  const Problem& hnd = subject.problem_in(KvLayout::HND);
  EXPECT_EQ(&subject.problem_in(KvLayout::HND), &hnd);
  EXPECT_EQ(hnd.kv_layout, KvLayout::HND);
  EXPECT_EQ(hnd.key_cache.data, small_decode().key_cache.data);
  EXPECT_EQ(hnd.value_cache.data, small_decode().value_cache.data);
  EXPECT_EQ(subject.problem().kv_layout, KvLayout::NHD); // the subject's own is untouched

  // The CPU kernels read HND: each configuration runs on the kept copy and passes.
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  Recorder rec;
  for (const KernelConfig& cfg :
       {KernelConfig{Family::decode_v1, {{"split", 1}}},
        KernelConfig{Family::decode_v2, {{"partition", 256}, {"split", 1}}}}) {
    const CheckedRunResult r = checked_run(rec.link(), *be, subject, run_of(cfg), {});
    EXPECT_EQ(r.status, RunStatus::passed) << cfg.key() << ": " << r.reason;
  }
  EXPECT_EQ(&subject.problem_in(KvLayout::HND), &hnd);
}

TEST(CheckedRun, TheReferenceIsAPhaseOutsideTheRunsFaultUnitAndIsComputedOnce) {
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  CheckSubject subject("decode", small_decode());
  Recorder rec;
  const KernelConfig a{Family::decode_v1, {{"split", 0}}};
  const KernelConfig b{Family::decode_v1, {{"split", 1}}};
  (void)checked_run(rec.link(), *be, subject, run_of(a), {});
  (void)checked_run(rec.link(), *be, subject, run_of(b), {});
  // run a: begin(run) end begin(phase) end begin(run) end; run b: begin(run) end.
  std::vector<std::string> seen;
  for (const WorkerMessage& m : rec.sent) {
    if (const auto* bm = std::get_if<BeginMsg>(&m)) {
      seen.push_back(bm->fault_unit ? "run " + bm->run->key : "phase " + bm->key);
    } else if (std::holds_alternative<EndMsg>(m)) {
      seen.push_back("end");
    }
  }
  const std::vector<std::string> want = {
      "run " + a.key(), "end", "phase reference of decode", "end", "run " + a.key(), "end",
      "run " + b.key(), "end"};
  EXPECT_EQ(seen, want);
}

TEST(CheckedRun, ARefusalIsSkippedWithTheReasonAndComputesNoReference) {
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  CheckSubject subject("decode", small_decode());
  Recorder rec;
  const KernelConfig cfg{Family::decode_v2, {{"partition", 40}, {"split", 1}}};
  const CheckedRunResult r = checked_run(rec.link(), *be, subject, run_of(cfg), {});
  EXPECT_EQ(r.status, RunStatus::skipped);
  EXPECT_NE(r.reason.find("not a multiple of block_size 16"), std::string::npos) << r.reason;
  for (const WorkerMessage& m : rec.sent) {
    const auto* bm = std::get_if<BeginMsg>(&m);
    EXPECT_TRUE(bm == nullptr || bm->fault_unit) << "a reference phase for a refused run";
  }
}

TEST(CheckedRun, AWrongOutputFailsWithItsFiguresAndAnErrorIsAnError) {
  CheckSubject subject("decode", small_decode());
  Recorder rec;
  const KernelConfig cfg{Family::decode_v1, {{"split", 1}}};
  Broken wrong(make_cpu_backend({.threads = 2, .kernels = ""}), /*throws=*/false);
  RunRequest req;
  req.timing = quick_timing();
  req.diagnose = true;
  const CheckedRunResult f = checked_run(rec.link(), wrong, subject, run_of(cfg), req);
  EXPECT_EQ(f.status, RunStatus::failed);
  ASSERT_TRUE(f.check.has_value());
  EXPECT_FALSE(f.check->report.pass);
  EXPECT_EQ(f.check->report.bad, 1);
  EXPECT_FALSE(f.timing.has_value()) << "a failed run is never timed";

  Broken throwing(make_cpu_backend({.threads = 2, .kernels = ""}), /*throws=*/true);
  const CheckedRunResult e = checked_run(rec.link(), throwing, subject, run_of(cfg), req);
  EXPECT_EQ(e.status, RunStatus::error);
  EXPECT_EQ(e.reason, "no such kernel today");
}

// A session: a crashing configuration is a fault with its reason, the runs after it go on in a
// fresh worker, and every run's key is finished.
TEST(CheckedRun, ASessionTurnsACrashIntoAFaultAndGoesOn) {
  const KernelConfig crash{Family::decode_v1, {{"split", 0}}};
  const KernelConfig fine{Family::decode_v1, {{"split", 1}}};
  ::setenv("ATTN_TUNE_TEST_FAULTS", ("segv:" + crash.key()).c_str(), 1);
  CheckedSession session;
  std::vector<std::pair<std::string, CheckedRunResult>> got;
  session.work = [&](const WorkerLink& link, int) {
    auto be = make_cpu_backend({.threads = 2, .kernels = ""});
    link.opened(*be);
    CheckSubject subject("decode", small_decode());
    for (const KernelConfig& c : {crash, fine}) {
      if (link.finished(c.key())) {
        continue;
      }
      const RunIdentity run = run_of(c);
      link.result(run, checked_run(link, *be, subject, run, {}));
    }
    return 0;
  };
  std::string device;
  session.on_opened = [&](const OpenedMsg& m) { device = m.device.id; };
  session.on_result = [&](const RunIdentity& run, const CheckedRunResult& r) {
    got.emplace_back(run.key, r);
  };
  const SupervisedRun run = session.run(/*in_process=*/false);
  ::unsetenv("ATTN_TUNE_TEST_FAULTS");
  EXPECT_EQ(run.faults, 1);
  EXPECT_EQ(device, "cpu");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].first, crash.key());
  EXPECT_EQ(got[0].second.status, RunStatus::fault);
  EXPECT_TRUE(test::says_sigsegv(got[0].second.reason)) << got[0].second.reason;
  EXPECT_EQ(got[1].first, fine.key());
  EXPECT_EQ(got[1].second.status, RunStatus::passed) << got[1].second.reason;
  EXPECT_EQ(session.finished, (std::set<std::string>{crash.key(), fine.key()}));
}

} // namespace
} // namespace attn
