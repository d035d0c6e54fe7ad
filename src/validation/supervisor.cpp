// The supervisor's side of worker_protocol.h: fork, read typed messages under the unit's
// deadline, and turn how a worker ended into a fault, an exception or its exit code.
// fork, not exec: the worker inherits the parsed options, the plan and the set of units already
// done without any serialisation. The supervisor itself never touches a device (a CUDA context
// does not survive a fork), so every worker starts from a clean process.
#include "src/validation/supervisor.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <optional>
#include <poll.h>
#include <stdexcept>
#include <string>
#include <string_view>
#include <sys/wait.h>
#include <unistd.h>

#include "src/backends/plugin/plugin_library.h"
#include "src/io/child_process.h"
#include "src/io/stop_signals.h"
#include "src/io/teardown.h"
#include "src/model/errors.h"

namespace attn {

namespace {

using Clock = std::chrono::steady_clock;

// Exit status of a worker that ended itself after a DeviceFault or an exception it reported.
constexpr int kWorkerReportedExit = 70;

// The unit a worker's teardown is, after its return.
constexpr const char* kTeardownUnit = "teardown";

// Whether process `pid` is stopped by a signal (state T in /proc; a debugger's tracing stop, t,
// is not: someone is at work on it).
bool is_stopped(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) {
    return false;
  }
  char buf[512] = {};
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const std::string_view stat(buf, n);
  const std::size_t paren = stat.rfind(')'); // the command name may hold spaces and parentheses
  return paren != std::string_view::npos && paren + 2 < stat.size() && stat[paren + 2] == 'T';
}

// How long a worker's teardown (the plugins' destroy) may take after it returned its results:
// 30 s, or less when the plugins' time to declare themselves is set lower.
double teardown_seconds() {
  try {
    return std::min(30.0, plugin_probe_timeout_s());
  } catch (const InputError&) {
    return 30.0;
  }
}

// The worker's side: runs the work and turns how it ended into a last message and an exit.
[[noreturn]] void worker_main(const SupervisorHooks& hooks, int index, int fd) {
  const Emit emit = [fd](const WorkerMessage& m) {
    if (!write_all(fd, encode_message(m) + "\n")) {
      ::_exit(kWorkerReportedExit); // the supervisor is gone: nobody is left to report to
    }
  };
  int code = kWorkerReportedExit;
  defer_teardown_from_now();
  try {
    code = hooks.work(emit, index);
    emit(ReturnMsg{code});
    // The results are the supervisor's now: what a plugin's destroy does cannot lose them. The
    // teardown is a unit of its own, so that a worker ending inside it (a crash, an exit(0), its
    // deadline) is told from one that finished it.
    emit(BeginMsg{kTeardownUnit, teardown_seconds(), false, {}});
    run_deferred_teardown();
    emit(EndMsg{});
  } catch (const InputError& e) {
    emit(ExceptionMsg{ExceptionKind::input, e.what()});
    code = kWorkerReportedExit;
  } catch (const DeviceUnavailable& e) {
    emit(ExceptionMsg{ExceptionKind::device, e.what()});
    code = kWorkerReportedExit;
  } catch (const DeviceFault& e) {
    emit(ExceptionMsg{ExceptionKind::fault, e.what()});
    code = kWorkerReportedExit;
  } catch (const KernelFault& e) {
    // The kernels' own error outside a run (a Python module's can_run raising while asked what
    // it accepts): the unit in flight is charged, as for a crash there.
    emit(ExceptionMsg{ExceptionKind::fault, e.what()});
    code = kWorkerReportedExit;
  } catch (const std::exception& e) {
    emit(ExceptionMsg{ExceptionKind::internal, e.what()});
    code = kWorkerReportedExit;
  }
  std::fflush(nullptr);
  // _exit: no destructors or atexit handlers of a process whose device may be in a bad state.
  ::_exit(code);
}

// What the supervisor learns from one worker.
struct WorkerEnd {
  int status = 0;                    // waitpid's
  bool timed_out = false;            // killed by the supervisor at the unit's deadline
  double deadline_s = 0.0;           // that deadline
  std::optional<BeginMsg> unit;      // the unit in flight when it ended
  std::optional<ReturnMsg> ret;      // its return
  bool teardown_timed_out = false;   // killed at the teardown's deadline, after its return
  std::optional<ExceptionMsg> error; // its exception
  std::string unreadable;            // why a message could not be read (the worker is killed)
  std::size_t cut_off = 0;           // bytes of a last message without its end of line
  bool progressed = false;           // it finished a configuration's run
  double stopped_s = 0.0;            // killed after sitting stopped this long outside a unit
};

WorkerEnd run_worker(const SupervisorHooks& hooks, int index) {
  const ForkedChild worker =
      fork_child([&](int fd) { worker_main(hooks, index, fd); }, "worker process");
  const pid_t pid = worker.pid;
  const int fd = worker.read_fd;

  WorkerEnd end;
  bool has_deadline = false; // plain flag and time: GCC warns on an optional time_point
  Clock::time_point deadline{};
  std::string buf;
  bool open = true;
  bool stopped = false; // seen stopped outside a unit with a deadline, since `stopped_since`
  Clock::time_point stopped_since{};
  while (open) {
    // A look every second at least: without a deadline, at whether the worker was stopped from
    // outside; always, at whether the command was told to stop.
    int wait_ms = 1000;
    if (has_deadline) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      wait_ms = int(std::max<long long>(0, std::min<long long>(left, 1000)));
    }
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, wait_ms);
    if (pending_stop_signal() != 0) {
      // The command was told to stop and reports what it finished (defer_stop_signals): the
      // worker goes now, whatever it was doing.
      ::kill(pid, SIGKILL);
      break;
    }
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r == 0 && !has_deadline) {
      if (!is_stopped(pid)) {
        stopped = false;
        continue;
      }
      if (!stopped) {
        stopped = true;
        stopped_since = Clock::now();
      }
      const double for_s = std::chrono::duration<double>(Clock::now() - stopped_since).count();
      if (for_s < hooks.stopped_seconds) {
        continue;
      }
      ::kill(pid, SIGKILL);
      end.stopped_s = for_s;
      break;
    }
    stopped = false;
    if (r == 0 && Clock::now() < deadline) {
      continue; // a second's look, the deadline still ahead
    }
    if (r == 0) {
      // The unit overran its deadline: a hang, as far as anyone waiting for it is concerned.
      ::kill(pid, SIGKILL);
      (end.ret ? end.teardown_timed_out : end.timed_out) = true;
      break;
    }
    if (!read_some(fd, buf)) {
      open = false;
      continue;
    }
    for (std::size_t nl; open && (nl = buf.find('\n')) != std::string::npos;) {
      WorkerMessage m;
      try {
        m = decode_message(std::string_view(buf).substr(0, nl));
      } catch (const ProtocolError& e) {
        // A worker that says what cannot be read is in no state to go on: end it, so that a
        // garbled message is a fault with its reason instead of a wait for what never comes.
        ::kill(pid, SIGKILL);
        end.unreadable = e.what();
        open = false;
        break;
      }
      buf.erase(0, nl + 1);
      if (const auto* b = std::get_if<BeginMsg>(&m)) {
        end.unit = *b;
        end.deadline_s = b->deadline_s;
        has_deadline = end.deadline_s > 0;
        deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(end.deadline_s));
      } else if (std::holds_alternative<EndMsg>(m)) {
        // A configuration's run that ended is done for good (the next worker skips it); a phase
        // is done again by the next worker, so it is no progress.
        end.progressed = end.progressed || (end.unit && end.unit->run);
        end.unit.reset();
        has_deadline = false;
      } else if (const auto* ret = std::get_if<ReturnMsg>(&m)) {
        end.ret = *ret;
      } else if (const auto* x = std::get_if<ExceptionMsg>(&m)) {
        end.error = *x;
      } else if (hooks.on_message) {
        hooks.on_message(m);
      }
    }
  }
  if (end.unreadable.empty()) {
    end.cut_off = buf.size();
  }
  ::close(fd);
  end.status = wait_for(pid, "the worker process");
  return end;
}

// Whether the worker was ended by a signal that a kernel's own failure does not raise (those are
// SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP; a hang meets its deadline): SIGKILL from
// the OOM killer or an operator, SIGTERM, SIGINT, SIGHUP or SIGQUIT from a person or a job
// runner. The supervisor's own kills (a deadline, a stopped worker, a garbled message) are not.
bool killed_from_outside(const WorkerEnd& end) {
  if (end.timed_out || end.stopped_s > 0 || !end.unreadable.empty() || end.error ||
      !WIFSIGNALED(end.status)) {
    return false;
  }
  const int sig = WTERMSIG(end.status);
  return sig == SIGKILL || sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
}

void replaced(const SupervisorHooks& hooks, const std::string& text) {
  if (hooks.on_replaced) {
    hooks.on_replaced(text);
  } else if (hooks.on_message) {
    hooks.on_message(LogMsg{text});
  }
}

} // namespace

SupervisedRun supervise(const SupervisorHooks& hooks, bool in_process) {
  SupervisedRun run;
  if (in_process) {
    const Emit emit = [&](const WorkerMessage& m) {
      if (!std::holds_alternative<BeginMsg>(m) && !std::holds_alternative<EndMsg>(m) &&
          hooks.on_message) {
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
  // The run in flight when a worker was last killed from outside: run again once, charged to
  // the kernels only when the same kill ends it a second time (an OOM kill it brings on itself).
  std::string killed_run;
  for (;;) {
    const WorkerEnd end = run_worker(hooks, run.workers++);
    if (const int sig = pending_stop_signal(); sig != 0) {
      // However the worker ended: the command was told to stop.
      throw StopRequested(sig, end.unit ? end.unit->key : std::string());
    }
    if (end.ret && !end.timed_out && end.unreadable.empty()) {
      run.exit_code = end.ret->code;
      if (end.teardown_timed_out) {
        char b[48];
        std::snprintf(b, sizeof b, "%.1f s", teardown_seconds());
        run.teardown_failure = std::string("the worker's teardown after its work (a plugin's "
                                           "destroy) had not ended after ") + b + "; it was killed";
      } else if (end.unit || !WIFEXITED(end.status) || WEXITSTATUS(end.status) != end.ret->code) {
        run.teardown_failure = "the worker's teardown after its work (a plugin's destroy) ended "
                               "it: worker " + describe_wait_status(end.status);
      }
      return run;
    }
    const ExceptionKind kind = end.error ? end.error->kind : ExceptionKind::internal;
    const std::string what = end.error ? end.error->what : "";
    if (end.error && kind == ExceptionKind::input) {
      throw InputError(what);
    }
    if (end.error && kind == ExceptionKind::device) {
      throw DeviceUnavailable(what);
    }
    if (end.error && kind == ExceptionKind::internal) {
      throw std::runtime_error(what);
    }
    std::string reason;
    if (end.stopped_s > 0) {
      char b[160];
      std::snprintf(b, sizeof b,
                    "the worker sat stopped (SIGSTOP from outside) for %.0f s and was killed",
                    end.stopped_s);
      reason = b;
    } else if (end.timed_out) {
      char b[160];
      std::snprintf(b, sizeof b,
                    "timeout: no result after %.1f s (its deadline, from the expected time)",
                    end.deadline_s);
      reason = b;
    } else if (!end.unreadable.empty()) {
      reason =
          "the worker sent a message that cannot be read (" + end.unreadable + "); it was stopped";
    } else if (end.error) {
      reason = what;
    } else {
      reason = "worker " + describe_wait_status(end.status);
      if (end.cut_off > 0) {
        reason += " in the middle of a message (" + std::to_string(end.cut_off) +
                  " bytes without their end of line)";
      }
    }
    // A worker stopped from outside is no fault of the kernels, wherever it stood.
    const bool kernels_unit = end.unit && end.unit->fault_unit && end.stopped_s == 0;
    if (kernels_unit && !end.unit->run) {
      // A phase that calls into the kernels (a plugin's can_run over every size): the kernels
      // ended the worker, or raised an error that ended the phase, and would again.
      throw KernelFault(std::string(end.error ? "the kernels raised an error while "
                                              : "the kernels ended the worker while ") +
                        end.unit->key + ": " + reason);
    }
    if (kernels_unit && end.unit->run && killed_from_outside(end) && killed_run != end.unit->key) {
      killed_run = end.unit->key;
      replaced(hooks, "the worker was " + describe_wait_status(end.status) +
                          " from outside while " + end.unit->key +
                          " (an OOM kill or another process, not a fault the " +
                          "kernel raised); it runs again in a new worker");
      continue;
    }
    if (kernels_unit && end.unit->run) {
      if (killed_from_outside(end)) {
        reason += ", as on its first try: charged to it (an OOM kill it brings on, or a process "
                  "that kills it each time)";
      }
      deaths_outside = 0;
      ++run.faults;
      if (hooks.on_fault) {
        hooks.on_fault(*end.unit->run, reason);
      }
      continue;
    }
    const std::string where = end.unit ? " while " + end.unit->key : "";
    if (end.progressed) {
      deaths_outside = 0; // work was done since the last death: not the same death again
    }
    if (++deaths_outside >= 2) {
      throw std::runtime_error("the worker process failed twice" + where + ": " + reason);
    }
    replaced(hooks, "worker process failed" + where + " (" + reason + "); starting a new one");
  }
}

} // namespace attn
