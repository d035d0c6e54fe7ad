// Short-lived child processes: the text comes back; a crash, an exit without writing, a throw and
// a hang are told apart by the outcome, and none of them touches this process.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "src/io/child_process.h"

namespace attn {
namespace {

TEST(ChildProcess, HandsBackWhatTheChildWrote) {
  const pid_t me = ::getpid();
  const ChildOutcome out = run_in_child(
      [me] { return ::getpid() != me ? std::string(100000, 'x') + "end" : std::string("same"); },
      30.0);
  EXPECT_FALSE(out.timed_out);
  EXPECT_TRUE(WIFEXITED(out.status) && WEXITSTATUS(out.status) == 0);
  EXPECT_EQ(out.text.size(), 100003u); // more than a pipe holds: read while it is written
  EXPECT_EQ(out.text.substr(out.text.size() - 3), "end");
}

TEST(ChildProcess, CrashExitAndThrowAreOutcomesNotOurs) {
  // Abort rather than segfault: AddressSanitizer leaves SIGABRT alone and would report a SEGV.
  ChildOutcome out = run_in_child([]() -> std::string { std::abort(); }, 30.0);
  EXPECT_NE(describe_wait_status(out.status).find("SIGABRT"), std::string::npos);
  EXPECT_TRUE(out.text.empty());
  out = run_in_child([]() -> std::string { std::exit(0); }, 30.0);
  EXPECT_EQ(describe_wait_status(out.status), "exited with status 0");
  EXPECT_TRUE(out.text.empty());
  out = run_in_child([]() -> std::string { throw std::runtime_error("no"); }, 30.0);
  EXPECT_EQ(describe_wait_status(out.status), "exited with status 1");
}

TEST(ChildProcess, AHangIsKilledAtTheTimeLimit) {
  const auto t0 = std::chrono::steady_clock::now();
  const ChildOutcome out = run_in_child(
      []() -> std::string {
        for (;;) {
          ::pause();
        }
      },
      0.3);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(out.timed_out);
  EXPECT_TRUE(WIFSIGNALED(out.status) && WTERMSIG(out.status) == SIGKILL);
  EXPECT_LT(s, 10.0);
}

TEST(ChildProcess, WaitStatusIsNamed) {
  EXPECT_EQ(describe_wait_status(0), "exited with status 0");
  EXPECT_EQ(describe_wait_status(3 << 8), "exited with status 3");
  EXPECT_NE(describe_wait_status(SIGSEGV).find("SIGSEGV"), std::string::npos);
}

} // namespace
} // namespace attn
