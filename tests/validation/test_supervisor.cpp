// The supervisor on real processes: a worker that segfaults, aborts, hangs past its unit's
// deadline or ends with a sticky device fault costs that unit only; exceptions keep their kind;
// repeated deaths outside any unit end the run instead of looping.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "src/model/errors.h"
#include "src/validation/supervisor.h"
#include "tests/support/crash_reason.h"

namespace attn {
namespace {

using nlohmann::json;

RunIdentity unit_run(int i) { return {"unit " + std::to_string(i), std::nullopt, {{"unit", i}}}; }

// Units 0..n-1; unit i misbehaves as `how[i]` says ("segv", "abort", "hang", "fault", "kill" or
// "term": killed from outside each time, "kill_first": in the first worker only, or ok).
struct Plan {
  std::vector<std::string> how;
  std::set<int> done; // in the supervisor: units reported or faulted
  std::vector<std::pair<int, std::string>> faults;
  std::vector<int> finished;
};

SupervisorHooks hooks_for(Plan& plan) {
  SupervisorHooks h;
  h.work = [&plan](const Emit& emit, int worker) {
    for (int i = 0; i < int(plan.how.size()); ++i) {
      if (plan.done.count(i)) {
        continue;
      }
      emit(BeginMsg{"unit " + std::to_string(i), 1.0, true, unit_run(i)});
      const std::string& how = plan.how[std::size_t(i)];
      if (how == "segv") {
        std::raise(SIGSEGV);
      } else if (how == "abort") {
        std::abort();
      } else if (how == "hang") {
        std::this_thread::sleep_for(std::chrono::seconds(60));
      } else if (how == "fault") {
        throw DeviceFault("CUDA error cudaErrorIllegalAddress (sticky)");
      } else if (how == "kill" || (how == "kill_first" && worker == 0)) {
        std::raise(SIGKILL); // what the OOM killer or `kill -9 WORKER` does
      } else if (how == "term") {
        std::raise(SIGTERM);
      }
      emit(EndMsg{});
      CheckedRunResult r;
      r.status = RunStatus::passed;
      emit(ResultMsg{unit_run(i), r});
    }
    return 0;
  };
  h.on_message = [&plan](const WorkerMessage& m) {
    if (const auto* res = std::get_if<ResultMsg>(&m)) {
      plan.finished.push_back(res->run.context.value("unit", -1));
      plan.done.insert(res->run.context.value("unit", -1));
    }
  };
  h.on_fault = [&plan](const RunIdentity& run, const std::string& reason) {
    plan.faults.emplace_back(run.context.value("unit", -1), reason);
    plan.done.insert(run.context.value("unit", -1));
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
  EXPECT_TRUE(test::says_sigsegv(plan.faults[0].second)) << plan.faults[0].second;
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
    emit(SayMsg{"hello from worker " + std::to_string(worker)});
    return 3;
  };
  h.on_message = [&](const WorkerMessage& m) { got.push_back(std::get<SayMsg>(m).text); };
  const SupervisedRun run = supervise(h);
  EXPECT_EQ(run.exit_code, 3);
  EXPECT_EQ(got, (std::vector<std::string>{"hello from worker 0"}));
}

// A worker killed from outside in a run (SIGKILL, SIGTERM: an OOM kill, an operator) is not the
// kernel's fault: the run is tried again in a new worker, and charged only when the same kill
// ends it again.
TEST(Supervisor, AWorkerKilledFromOutsideRunsItsUnitAgainOnce) {
  Plan plan;
  plan.how = {"ok", "kill_first", "ok", "kill", "term", "ok"};
  std::vector<std::string> logs;
  SupervisorHooks h = hooks_for(plan);
  const auto results = h.on_message;
  h.on_message = [&](const WorkerMessage& m) {
    if (const auto* l = std::get_if<LogMsg>(&m)) {
      logs.push_back(l->text);
    }
    results(m);
  };
  const SupervisedRun run = supervise(h);
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.faults, 2);
  EXPECT_EQ(run.workers, 6);
  EXPECT_EQ(plan.finished, (std::vector<int>{0, 1, 2, 5}));
  ASSERT_EQ(plan.faults.size(), 2u);
  EXPECT_EQ(plan.faults[0].first, 3);
  EXPECT_NE(plan.faults[0].second.find("SIGKILL"), std::string::npos) << plan.faults[0].second;
  EXPECT_NE(plan.faults[0].second.find("first try"), std::string::npos) << plan.faults[0].second;
  EXPECT_EQ(plan.faults[1].first, 4);
  EXPECT_NE(plan.faults[1].second.find("SIGTERM"), std::string::npos) << plan.faults[1].second;
  ASSERT_EQ(logs.size(), 3u);
  EXPECT_NE(logs[0].find("from outside while unit 1"), std::string::npos) << logs[0];
  EXPECT_NE(logs[0].find("runs again"), std::string::npos) << logs[0];
}

TEST(Supervisor, DeathOutsideAnyUnitTwiceEndsTheRun) {
  SupervisorHooks h;
  h.work = [](const Emit& emit, int) -> int {
    emit(BeginMsg{"reference", 0.0, /*fault_unit=*/false, std::nullopt});
    std::raise(SIGSEGV);
    return 0;
  };
  try {
    (void)supervise(h);
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("failed twice while reference"), std::string::npos) << what;
    EXPECT_TRUE(test::says_sigsegv(what)) << what;
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
  h.on_message = [&](const WorkerMessage& m) { logs.push_back(std::get<LogMsg>(m).text); };
  const SupervisedRun run = supervise(h);
  EXPECT_EQ(run.workers, 2);
  EXPECT_EQ(run.faults, 0);
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_NE(logs[0].find("SIGKILL"), std::string::npos) << logs[0];
}

// Deaths outside a unit with runs recorded between them are not "the same death twice": each
// worker did work that the next skips, so the run goes on (an OOM kill hours apart from another).
TEST(Supervisor, DeathsOutsideAUnitWithRunsBetweenAreEachRetried) {
  SupervisorHooks h;
  h.work = [](const Emit& emit, int worker) -> int {
    if (worker < 2) {
      emit(BeginMsg{"unit " + std::to_string(worker), 1.0, true, unit_run(worker)});
      emit(EndMsg{});
      emit(BeginMsg{"reference", 0.0, /*fault_unit=*/false, std::nullopt});
      std::raise(SIGKILL);
    }
    return 0;
  };
  std::vector<std::string> logs;
  h.on_message = [&](const WorkerMessage& m) {
    if (const auto* l = std::get_if<LogMsg>(&m)) {
      logs.push_back(l->text);
    }
  };
  const SupervisedRun run = supervise(h);
  EXPECT_EQ(run.workers, 3);
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(logs.size(), 2u);
}

// A worker stopped from outside (SIGSTOP) where no unit's deadline watches it, in the reference
// say, is killed after `stopped_seconds` and replaced, instead of being waited for forever.
TEST(Supervisor, AWorkerStoppedOutsideAUnitIsReplaced) {
  SupervisorHooks h;
  h.stopped_seconds = 0.5;
  h.work = [](const Emit& emit, int worker) -> int {
    if (worker == 0) {
      emit(BeginMsg{"reference", 0.0, /*fault_unit=*/false, std::nullopt});
      std::raise(SIGSTOP);
    }
    return 5;
  };
  std::vector<std::string> logs;
  h.on_message = [&](const WorkerMessage& m) {
    if (const auto* l = std::get_if<LogMsg>(&m)) {
      logs.push_back(l->text);
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  const SupervisedRun run = supervise(h);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_EQ(run.workers, 2);
  EXPECT_EQ(run.exit_code, 5);
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_NE(logs[0].find("while reference (the worker sat stopped (SIGSTOP from outside)"),
            std::string::npos)
      << logs[0];
}

TEST(Supervisor, InProcessRunsHereAndPassesMessages) {
  const auto me = ::getpid();
  SupervisorHooks h;
  int seen = 0;
  h.work = [me](const Emit& emit, int) {
    emit(BeginMsg{"u", 1.0, true, unit_run(0)});
    emit(SayMsg{std::to_string(::getpid())});
    emit(EndMsg{});
    return ::getpid() == me ? 0 : 1;
  };
  h.on_message = [&](const WorkerMessage& m) {
    const auto* say = std::get_if<SayMsg>(&m);
    seen += say != nullptr && say->text == std::to_string(me) ? 1 : 100;
  };
  const SupervisedRun run = supervise(h, /*in_process=*/true);
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(seen, 1);
}

// The write end of the worker's pipe to its supervisor, found among the process's descriptors,
// so that a test can send what a dying or confused worker would.
int worker_pipe() {
  for (int fd = 3; fd < 1024; ++fd) {
    char path[64];
    char target[128] = {};
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    const ssize_t n = ::readlink(path, target, sizeof target - 1);
    if (n > 0 && std::string(target, std::size_t(n)).rfind("pipe:", 0) == 0 &&
        (::fcntl(fd, F_GETFL) & O_ACCMODE) == O_WRONLY) {
      return fd;
    }
  }
  return -1;
}

void write_raw(const std::string& bytes) {
  const int fd = worker_pipe();
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), ssize_t(bytes.size()));
}

// A worker whose unit `how` says something unreadable, or dies mid-message, then unit 1 is fine.
SupervisorHooks garbling(const std::string& how, std::vector<std::string>& faults,
                         std::set<int>& done) {
  SupervisorHooks h;
  h.work = [&how, &done](const Emit& emit, int) {
    for (int i = 0; i < 2; ++i) {
      if (done.count(i)) {
        continue;
      }
      emit(BeginMsg{"unit " + std::to_string(i), 30.0, true, unit_run(i)});
      if (i == 0) {
        if (how == "not json") {
          write_raw("this is not a message\n");
        } else if (how == "other version") {
          write_raw("{\"v\": 99, \"type\": \"end\"}\n");
        } else if (how == "missing field") {
          write_raw("{\"v\": 1, \"type\": \"result\", \"run\": {\"key\": \"x\"}}\n");
        } else if (how == "cut off") {
          write_raw("{\"v\": 1, \"type\": \"say\", \"te");
          ::_exit(9);
        }
        // A worker that goes on after garbling would otherwise run into its deadline.
        std::this_thread::sleep_for(std::chrono::seconds(60));
      }
      emit(EndMsg{});
      CheckedRunResult r;
      r.status = RunStatus::passed;
      emit(ResultMsg{unit_run(i), r});
    }
    return 0;
  };
  h.on_message = [&done](const WorkerMessage& m) {
    if (const auto* res = std::get_if<ResultMsg>(&m)) {
      done.insert(res->run.context.value("unit", -1));
    }
  };
  h.on_fault = [&faults, &done](const RunIdentity& run, const std::string& reason) {
    faults.push_back(reason);
    done.insert(run.context.value("unit", -1));
  };
  return h;
}

TEST(Supervisor, AnUnreadableMessageIsAFaultWithItsReasonNotAHang) {
  for (const std::string how : {"not json", "other version", "missing field"}) {
    std::vector<std::string> faults;
    std::set<int> done;
    const auto t0 = std::chrono::steady_clock::now();
    const SupervisedRun run = supervise(garbling(how, faults, done));
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(run.faults, 1) << how;
    EXPECT_EQ(done, (std::set<int>{0, 1})) << how;
    ASSERT_EQ(faults.size(), 1u) << how;
    EXPECT_NE(faults[0].find("cannot be read"), std::string::npos) << faults[0];
    EXPECT_LT(secs, 20.0) << how << ": the supervisor must not wait for the unit's deadline";
  }
}

TEST(Supervisor, AMessageCutOffByTheWorkersDeathIsAFault) {
  std::vector<std::string> faults;
  std::set<int> done;
  const SupervisedRun run = supervise(garbling("cut off", faults, done));
  EXPECT_EQ(run.faults, 1);
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_NE(faults[0].find("exited with status 9 in the middle of a message"), std::string::npos)
      << faults[0];
}

} // namespace
} // namespace attn
