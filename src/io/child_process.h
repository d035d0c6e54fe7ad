// Child processes for work whose crash, hang or exit must not take attn-tune with it: a fork that
// writes to its parent through a pipe (the supervisor's workers), a short-lived one that hands
// back what it found as text under a time limit, and what a wait status means in words.
#pragma once
#include <sys/types.h>

#include <functional>
#include <string>

namespace attn {

// A forked child and the read end of the pipe it writes to.
struct ForkedChild {
  pid_t pid = -1;
  int read_fd = -1; // close-on-exec; the caller closes it
};

// Forks a child that runs `body` with the write end of a new pipe. The child dies with this
// process (a child left behind would go on holding devices, folders or foreign code for nobody);
// `body` ends it with _exit, and a `body` that returns ends it with status 1. `what` names the
// child in errors ("worker process"). Throws std::runtime_error when the pipe or the process
// cannot be made.
[[nodiscard]] ForkedChild fork_child(const std::function<void(int write_fd)>& body,
                                     const std::string& what);

// Writes all of `s` to `fd`; false when nobody reads the other end any more.
[[nodiscard]] bool write_all(int fd, const std::string& s);
// Appends what one read of `fd` gives to `out` (nothing when a signal interrupted it); false at
// the end of the pipe or on an error.
[[nodiscard]] bool read_some(int fd, std::string& out);
// waitpid's status for `pid`, through interruptions; throws std::runtime_error naming `what`.
[[nodiscard]] int wait_for(pid_t pid, const std::string& what);

// How a child ended and what it wrote.
struct ChildOutcome {
  std::string text;       // everything the child wrote into the pipe
  int status = 0;         // waitpid's status; meaningful when !timed_out
  bool timed_out = false; // it was still running at the time limit and was killed (SIGKILL)
};

// Forks; the child runs `work`, writes what it returns into a pipe and _exits with 0 (1 when
// `work` throws), so that no destructor or exit handler of this process runs there. The child
// dies with this process. The parent collects the text until the child has ended, or kills it
// after `timeout_s` seconds. Throws std::runtime_error when the pipe or the process cannot be
// made.
[[nodiscard]] ChildOutcome run_in_child(const std::function<std::string()>& work, double timeout_s);

// "killed by SIGSEGV (Segmentation fault)", "exited with status 3": what a wait status means.
[[nodiscard]] std::string describe_wait_status(int status);

} // namespace attn
