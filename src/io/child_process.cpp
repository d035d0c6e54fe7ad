#include "src/io/child_process.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <stdexcept>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/io/stop_signals.h"

namespace attn {

namespace {

[[noreturn]] void child_main(const std::function<std::string()>& work, int fd) {
  int code = 0;
  try {
    if (!write_all(fd, work())) {
      code = 1;
    }
  } catch (...) {
    code = 1;
  }
  std::fflush(nullptr);
  ::_exit(code);
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

bool write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    done += std::size_t(n);
  }
  return true;
}

bool read_some(int fd, std::string& out) {
  char chunk[65536];
  const ssize_t n = ::read(fd, chunk, sizeof chunk);
  if (n < 0 && errno == EINTR) {
    return true;
  }
  if (n <= 0) {
    return false;
  }
  out.append(chunk, std::size_t(n));
  return true;
}

int wait_for(pid_t pid, const std::string& what) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      throw std::runtime_error("cannot wait for " + what + ": " + std::strerror(errno));
    }
  }
  return status;
}

ForkedChild fork_child(const std::function<void(int write_fd)>& body, const std::string& what) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw std::runtime_error("cannot create the pipe to a " + what + ": " + std::strerror(errno));
  }
  std::fflush(nullptr); // or the child would print this process's buffered output again
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::runtime_error("cannot start a " + what + ": " + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    restore_default_stop_actions();
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() == parent) { // else this process ended before the signal was asked for
      body(fds[1]);
    }
    ::_exit(1);
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

ChildOutcome run_in_child(const std::function<std::string()>& work, double timeout_s) {
  using Clock = std::chrono::steady_clock;
  const ForkedChild child = fork_child([&work](int fd) { child_main(work, fd); }, "child process");
  const pid_t pid = child.pid;
  const int fd = child.read_fd;

  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(std::max(0.0, timeout_s)));
  ChildOutcome out;
  bool exited = false;
  bool open = true;
  // The end of the pipe alone does not mean the child has ended (it may close its descriptors),
  // nor the reverse (a process it started may hold the pipe): watch for both, in short waits.
  for (;;) {
    if (!exited && ::waitpid(pid, &out.status, WNOHANG) == pid) {
      exited = true;
    }
    if (exited && !open) {
      break;
    }
    const long long left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0 && !exited) {
      ::kill(pid, SIGKILL);
      out.timed_out = true;
      break;
    }
    const int wait_ms = exited ? 0 : int(std::min<long long>(left, 50));
    if (!open) {
      ::poll(nullptr, 0, std::min(wait_ms, 10));
      continue;
    }
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, wait_ms);
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r <= 0) {
      open = !exited; // once it has ended, an empty pipe has nothing more to come
      continue;
    }
    open = read_some(fd, out.text);
  }
  ::close(fd);
  if (!exited) {
    out.status = wait_for(pid, "a child process");
  }
  return out;
}

} // namespace attn
