// The supervisor on real processes: a worker that segfaults, aborts, hangs past its unit's
// deadline or ends with a sticky device fault costs that unit only; exceptions keep their kind;
// repeated deaths outside any unit end the run instead of looping.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "src/io/supervisor.h"
#include "src/model/errors.h"

namespace attn {
namespace {

using nlohmann::json;

// AddressSanitizer catches SIGSEGV itself, reports, and exits with status 1.
#if defined(__SANITIZE_ADDRESS__)
constexpr const char* kSegvSays = "exited with status";
#else
constexpr const char* kSegvSays = "SIGSEGV";
#endif

// Units 0..n-1; unit i misbehaves as `how[i]` says ("segv", "abort", "hang", "fault", or ok).
struct Plan {
  std::vector<std::string> how;
  std::set<int> done; // in the supervisor: units reported or faulted
  std::vector<std::pair<int, std::string>> faults;
  std::vector<int> finished;
};

SupervisorHooks hooks_for(Plan& plan) {
  SupervisorHooks h;
  h.work = [&plan](const Emit& emit, int) {
    for (int i = 0; i < int(plan.how.size()); ++i) {
      if (plan.done.count(i)) {
        continue;
      }
      emit(begin_message("unit " + std::to_string(i), 1.0, {{"unit", i}}));
      const std::string& how = plan.how[std::size_t(i)];
      if (how == "segv") {
        std::raise(SIGSEGV);
      } else if (how == "abort") {
        std::abort();
      } else if (how == "hang") {
        std::this_thread::sleep_for(std::chrono::seconds(60));
      } else if (how == "fault") {
        throw DeviceFault("CUDA error cudaErrorIllegalAddress (sticky)");
      }
      emit(end_message());
      emit({{"ev", "finished"}, {"unit", i}});
    }
    return 0;
  };
  h.on_message = [&plan](const json& m) {
    if (m.value("ev", "") == "finished") {
      plan.finished.push_back(m.value("unit", -1));
      plan.done.insert(m.value("unit", -1));
    }
  };
  h.on_fault = [&plan](const json& info, const std::string& reason) {
    plan.faults.emplace_back(info.value("unit", -1), reason);
    plan.done.insert(info.value("unit", -1));
  };
  return h;
}

TEST(Supervisor, EachBadUnitIsAFaultWithItsReasonAndTheRestRun) {
  Plan plan;
  plan.how = {"ok", "segv", "ok", "abort", "hang", "fault", "ok"};
  const auto t0 = std::chrono::steady_clock::now();
  const SupervisedRun run = supervise(hooks_for(plan));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.faults, 4);
  EXPECT_EQ(run.workers, 5);
  EXPECT_EQ(plan.finished, (std::vector<int>{0, 2, 6}));
  ASSERT_EQ(plan.faults.size(), 4u);
  EXPECT_EQ(plan.faults[0].first, 1);
  EXPECT_NE(plan.faults[0].second.find(kSegvSays), std::string::npos) << plan.faults[0].second;
  EXPECT_EQ(plan.faults[1].first, 3);
  EXPECT_NE(plan.faults[1].second.find("SIGABRT"), std::string::npos) << plan.faults[1].second;
  EXPECT_EQ(plan.faults[2].first, 4);
  EXPECT_NE(plan.faults[2].second.find("timeout"), std::string::npos) << plan.faults[2].second;
  EXPECT_EQ(plan.faults[3].first, 5);
  EXPECT_NE(plan.faults[3].second.find("cudaErrorIllegalAddress"), std::string::npos)
      << plan.faults[3].second;
  EXPECT_LT(secs, 30.0) << "the hang must end at its 1 s deadline";
}

TEST(Supervisor, ExceptionsKeepTheirKind) {
  SupervisorHooks h;
  h.work = [](const Emit&, int) -> int { throw InputError("bad profile"); };
  EXPECT_THROW((void)supervise(h), InputError);
  h.work = [](const Emit&, int) -> int { throw DeviceUnavailable("no GPU"); };
  EXPECT_THROW((void)supervise(h), DeviceUnavailable);
  h.work = [](const Emit&, int) -> int { throw std::runtime_error("disk full"); };
  try {
    (void)supervise(h);
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "disk full");
  }
}

TEST(Supervisor, ReturnCodeAndMessagesReachTheSupervisor) {
  SupervisorHooks h;
  std::vector<std::string> got;
  h.work = [](const Emit& emit, int worker) {
    emit({{"ev", "say"}, {"text", "hello from worker " + std::to_string(worker)}});
    return 3;
  };
  h.on_message = [&](const json& m) { got.push_back(m.value("text", "")); };
  const SupervisedRun run = supervise(h);
  EXPECT_EQ(run.exit_code, 3);
  EXPECT_EQ(got, (std::vector<std::string>{"hello from worker 0"}));
}

TEST(Supervisor, DeathOutsideAnyUnitTwiceEndsTheRun) {
  SupervisorHooks h;
  h.work = [](const Emit& emit, int) -> int {
    emit(begin_message("reference", 0.0, json::object(), /*fault_unit=*/false));
    std::raise(SIGSEGV);
    return 0;
  };
  try {
    (void)supervise(h);
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("failed twice while reference"), std::string::npos) << what;
    EXPECT_NE(what.find(kSegvSays), std::string::npos) << what;
  }
}

TEST(Supervisor, OneDeathOutsideAUnitIsRetried) {
  SupervisorHooks h;
  h.work = [](const Emit&, int worker) -> int {
    if (worker == 0) {
      std::raise(SIGKILL);
    }
    return 0;
  };
  std::vector<std::string> logs;
  h.on_message = [&](const json& m) { logs.push_back(m.value("text", "")); };
  const SupervisedRun run = supervise(h);
  EXPECT_EQ(run.workers, 2);
  EXPECT_EQ(run.faults, 0);
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_NE(logs[0].find("SIGKILL"), std::string::npos) << logs[0];
}

TEST(Supervisor, InProcessRunsHereAndPassesMessages) {
  const auto me = ::getpid();
  SupervisorHooks h;
  int seen = 0;
  h.work = [me](const Emit& emit, int) {
    emit(begin_message("u", 1.0, json::object()));
    emit({{"ev", "pid"}, {"pid", int(::getpid())}});
    emit(end_message());
    return ::getpid() == me ? 0 : 1;
  };
  h.on_message = [&](const json& m) { seen += m.value("ev", "") == "pid" ? 1 : 100; };
  const SupervisedRun run = supervise(h, /*in_process=*/true);
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(seen, 1);
}

TEST(Supervisor, WaitStatusIsNamed) {
  EXPECT_EQ(describe_wait_status(0), "exited with status 0");
  EXPECT_EQ(describe_wait_status(3 << 8), "exited with status 3");
  EXPECT_NE(describe_wait_status(SIGSEGV).find("SIGSEGV"), std::string::npos);
}

} // namespace
} // namespace attn
