// fork, not exec: the worker inherits the parsed options, the plan and the set of units already
// done without any serialisation. The supervisor itself never touches a device (a CUDA context
// does not survive a fork), so every worker starts from a clean process.
#include "src/io/supervisor.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <poll.h>
#include <stdexcept>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/model/errors.h"

namespace attn {

using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

// Exit status of a worker that ended itself after a DeviceFault or an exception it reported.
constexpr int kWorkerReportedExit = 70;

void write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      // The supervisor is gone: nobody is left to report to.
      ::_exit(kWorkerReportedExit);
    }
    done += std::size_t(n);
  }
}

// The worker's side: runs the work and turns how it ended into a last message and an exit.
[[noreturn]] void worker_main(const SupervisorHooks& hooks, int index, int fd, pid_t parent) {
  // Die with the supervisor: a worker left behind would keep the device and the folder.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) {
    ::_exit(kWorkerReportedExit);
  }
  const Emit emit = [fd](const json& m) { write_all(fd, m.dump() + "\n"); };
  int code = kWorkerReportedExit;
  try {
    code = hooks.work(emit, index);
    emit({{"ev", "return"}, {"code", code}});
  } catch (const InputError& e) {
    emit({{"ev", "exception"}, {"kind", "input"}, {"what", e.what()}});
    code = kWorkerReportedExit;
  } catch (const DeviceUnavailable& e) {
    emit({{"ev", "exception"}, {"kind", "device"}, {"what", e.what()}});
    code = kWorkerReportedExit;
  } catch (const DeviceFault& e) {
    emit({{"ev", "exception"}, {"kind", "fault"}, {"what", e.what()}});
    code = kWorkerReportedExit;
  } catch (const std::exception& e) {
    emit({{"ev", "exception"}, {"kind", "internal"}, {"what", e.what()}});
    code = kWorkerReportedExit;
  }
  std::fflush(nullptr);
  // _exit: no destructors or atexit handlers of a process whose device may be in a bad state.
  ::_exit(code);
}

// What the supervisor learns from one worker.
struct WorkerEnd {
  int status = 0;            // waitpid's
  bool timed_out = false;    // killed by the supervisor at the unit's deadline
  double deadline_s = 0.0;   // that deadline
  std::optional<json> unit;  // the begin message of the unit in flight when it ended
  std::optional<json> ret;   // its "return" message
  std::optional<json> error; // its "exception" message
};

WorkerEnd run_worker(const SupervisorHooks& hooks, int index) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("cannot create the worker pipe: ") + std::strerror(errno));
  }
  std::fflush(nullptr); // or the worker would print the supervisor's buffered output again
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::runtime_error(std::string("cannot start a worker process: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    worker_main(hooks, index, fds[1], parent);
  }
  ::close(fds[1]);

  WorkerEnd end;
  bool has_deadline = false; // plain flag and time: GCC warns on an optional time_point
  Clock::time_point deadline{};
  std::string buf;
  char chunk[65536];
  bool open = true;
  while (open) {
    int wait_ms = -1;
    if (has_deadline) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      wait_ms = int(std::max<long long>(0, std::min<long long>(left, 1 << 30)));
    }
    pollfd p{fds[0], POLLIN, 0};
    const int r = ::poll(&p, 1, wait_ms);
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r == 0) {
      // The unit overran its deadline: a hang, as far as anyone waiting for it is concerned.
      ::kill(pid, SIGKILL);
      end.timed_out = true;
      break;
    }
    const ssize_t n = ::read(fds[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      open = false;
      continue;
    }
    buf.append(chunk, std::size_t(n));
    for (std::size_t nl; (nl = buf.find('\n')) != std::string::npos;) {
      json m;
      try {
        m = json::parse(buf.substr(0, nl));
      } catch (const json::parse_error&) {
        m = json();
      }
      buf.erase(0, nl + 1);
      if (!m.is_object()) {
        continue;
      }
      const std::string ev = m.value("ev", "");
      if (ev == "begin") {
        end.unit = m;
        end.deadline_s = m.value("deadline_s", 0.0);
        has_deadline = end.deadline_s > 0;
        deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(end.deadline_s));
      } else if (ev == "end") {
        end.unit.reset();
        has_deadline = false;
      } else if (ev == "return") {
        end.ret = m;
      } else if (ev == "exception") {
        end.error = m;
      } else if (hooks.on_message) {
        hooks.on_message(m);
      }
    }
  }
  ::close(fds[0]);
  while (::waitpid(pid, &end.status, 0) < 0) {
    if (errno != EINTR) {
      throw std::runtime_error(std::string("cannot wait for the worker process: ") +
                               std::strerror(errno));
    }
  }
  return end;
}

std::string signal_name(int sig) {
  switch (sig) {
  case SIGSEGV:
    return "SIGSEGV";
  case SIGABRT:
    return "SIGABRT";
  case SIGBUS:
    return "SIGBUS";
  case SIGFPE:
    return "SIGFPE";
  case SIGILL:
    return "SIGILL";
  case SIGKILL:
    return "SIGKILL";
  case SIGTERM:
    return "SIGTERM";
  case SIGINT:
    return "SIGINT";
  case SIGTRAP:
    return "SIGTRAP";
  default:
    return "signal " + std::to_string(sig);
  }
}

} // namespace

json begin_message(const std::string& key, double deadline_s, const json& info, bool fault_unit) {
  return {{"ev", "begin"},
          {"key", key},
          {"deadline_s", deadline_s},
          {"info", info},
          {"fault_unit", fault_unit}};
}

json end_message() { return {{"ev", "end"}}; }

std::string describe_wait_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "killed by " + signal_name(sig) + " (" + strsignal(sig) + ")";
  }
  if (WIFEXITED(status)) {
    return "exited with status " + std::to_string(WEXITSTATUS(status));
  }
  return "ended with wait status " + std::to_string(status);
}

SupervisedRun supervise(const SupervisorHooks& hooks, bool in_process) {
  SupervisedRun run;
  if (in_process) {
    const Emit emit = [&](const json& m) {
      const std::string ev = m.value("ev", "");
      if (ev != "begin" && ev != "end" && hooks.on_message) {
        hooks.on_message(m);
      }
    };
    run.workers = 1;
    run.exit_code = hooks.work(emit, 0);
    return run;
  }
  // Deaths outside any configuration (building a problem, the reference, startup) are not a
  // kernel's fault; the same death twice in a row is a bug to report, not to retry forever.
  int deaths_outside = 0;
  for (;;) {
    const WorkerEnd end = run_worker(hooks, run.workers++);
    if (end.ret && !end.timed_out) {
      run.exit_code = end.ret->value("code", 0);
      return run;
    }
    const std::string kind = end.error ? end.error->value("kind", "") : "";
    const std::string what = end.error ? end.error->value("what", "") : "";
    if (kind == "input") {
      throw InputError(what);
    }
    if (kind == "device") {
      throw DeviceUnavailable(what);
    }
    if (kind == "internal") {
      throw std::runtime_error(what);
    }
    std::string reason;
    if (end.timed_out) {
      char b[160];
      std::snprintf(b, sizeof b,
                    "timeout: no result after %.1f s (its deadline, from the expected time)",
                    end.deadline_s);
      reason = b;
    } else if (kind == "fault") {
      reason = what;
    } else {
      reason = "worker " + describe_wait_status(end.status);
    }
    const bool fault_unit = end.unit && end.unit->value("fault_unit", true);
    if (fault_unit) {
      deaths_outside = 0;
      ++run.faults;
      if (hooks.on_fault) {
        hooks.on_fault(end.unit->value("info", json::object()), reason);
      }
      continue;
    }
    const std::string where =
        end.unit ? " while " + end.unit->value("key", std::string("working")) : "";
    if (++deaths_outside >= 2) {
      throw std::runtime_error("the worker process failed twice" + where + ": " + reason);
    }
    if (hooks.on_message) {
      hooks.on_message(
          {{"ev", "log"},
           {"text", "worker process failed" + where + " (" + reason + "); starting a new one"}});
    }
  }
}

} // namespace attn
