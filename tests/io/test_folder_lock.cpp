// FolderLock: a second lock on a held folder fails at once naming the holder's pid, in this
// process as in another; the lock is free again once its holder is gone. DeviceLock: a second
// timer on a device waits (and says so) or, without waiting, is refused naming the holder.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "src/io/folder_lock.h"
#include "src/model/errors.h"
#include "tests/support/files.h"

namespace attn {
namespace {

namespace fs = std::filesystem;

TEST(FolderLock, SecondLockFailsNamingTheHolder) {
  const fs::path dir = test::fresh_dir("lock_held");
  {
    const FolderLock first(dir.string());
    try {
      const FolderLock second(dir.string());
      FAIL() << "a held folder must not lock twice";
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("is in use by another attn-tune process (pid " +
                         std::to_string(::getpid()) + ")"),
                std::string::npos)
          << msg;
      EXPECT_NE(msg.find(dir.string()), std::string::npos) << msg;
    }
  }
  // Released with its holder.
  EXPECT_NO_THROW({ const FolderLock again(dir.string()); });
  fs::remove_all(dir);
}

TEST(FolderLock, AnotherProcessIsRefusedWhileHeld) {
  const fs::path dir = test::fresh_dir("lock_fork");
  const FolderLock held(dir.string());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      const FolderLock other(dir.string());
      ::_exit(0); // took the lock: wrong
    } catch (const InputError&) {
      ::_exit(7);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7) << "the child process got the lock";
  fs::remove_all(dir);
}

// A child forked while the lock is held (a sweep's worker) does not hold it on: once the parent
// lets go (or is killed), the folder is free though the child lives on, so that a sweep resumed
// at once after a kill is not refused by the dying worker.
TEST(FolderLock, AForkedChildDoesNotKeepTheLock) {
  const fs::path dir = test::fresh_dir("lock_child");
  int to_child[2];
  int from_child[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(from_child), 0);
  auto first = std::make_unique<FolderLock>(dir.string());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    (void)!::write(from_child[1], "r", 1); // running: past the fork's handlers
    char c = 0;
    (void)!::read(to_child[0], &c, 1); // lives until told
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(from_child[0], &c, 1), 1);
  first.reset();
  bool free_while_child_lives = false;
  try {
    const FolderLock again(dir.string());
    free_while_child_lives = true;
  } catch (const InputError&) {
  }
  (void)!::write(to_child[1], "x", 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) {
    ::close(fd);
  }
  fs::remove_all(dir);
  EXPECT_TRUE(free_while_child_lives);
}

TEST(FolderLock, MissingFolderIsAnInputError) {
  EXPECT_THROW({ const FolderLock l("/nonexistent/attn-tune/out"); }, InputError);
}

// A device lock in a private lock folder, so that tests never meet a real sweep's lock.
struct LockDir {
  fs::path dir;
  explicit LockDir(const std::string& name) : dir(test::fresh_dir("lock_" + name)) {
    ::setenv("ATTN_TUNE_LOCK_DIR", dir.c_str(), 1);
  }
  ~LockDir() {
    ::unsetenv("ATTN_TUNE_LOCK_DIR");
    fs::remove_all(dir);
  }
};

TEST(DeviceLock, SecondTimerWithoutWaitIsRefusedNamingTheHolder) {
  const LockDir ld("device_nowait");
  EXPECT_EQ(fs::path(DeviceLock::path_for("cuda-GPU-1/2")).parent_path(), ld.dir);
  EXPECT_EQ(fs::path(DeviceLock::path_for("cuda-GPU-1/2")).filename(),
            "attn-tune-device-cuda-GPU-1_2.lock");
  const DeviceLock held("cpu-host", /*wait=*/false, nullptr);
  try {
    const DeviceLock second("cpu-host", /*wait=*/false, nullptr);
    FAIL() << "two timers on one device";
  } catch (const DeviceUnavailable& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("(pid " + std::to_string(::getpid()) + ")"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--no-wait"), std::string::npos) << msg;
  }
  // Another device is another lock.
  EXPECT_NO_THROW({ const DeviceLock other("cpu-otherhost", false, nullptr); });
}

// A sweep's worker locks the device for the sweep: the pid the second timer is told is the one
// a user would stop (the sweep), not its forked worker's.
TEST(DeviceLock, TheHolderNamedIsTheOwnerPidGiven) {
  const LockDir ld("device_owner");
  const pid_t sweep = ::getppid();
  const DeviceLock held("cpu-host", /*wait=*/false, nullptr, sweep);
  try {
    const DeviceLock second("cpu-host", /*wait=*/false, nullptr);
    FAIL() << "two timers on one device";
  } catch (const DeviceUnavailable& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("(pid " + std::to_string(sweep) + ")"), std::string::npos) << msg;
  }
}

// A sweep killed with -9 leaves its worker holding the device's lock in the sweep's name for the
// moments the worker takes to die: a --no-wait timer started at once waits those moments instead
// of being refused by a process that is gone; a holder still alive refuses it at once.
TEST(DeviceLock, WithoutWaitAHolderThatIsGoneIsWaitedForBriefly) {
  const LockDir ld("device_dying");
  const pid_t gone = ::fork(); // a pid no process has any more
  if (gone == 0) {
    ::_exit(0);
  }
  ::waitpid(gone, nullptr, 0);
  auto held = std::make_unique<DeviceLock>("cpu-host", false, nullptr, gone);
  std::thread dying([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    held.reset();
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NO_THROW({ const DeviceLock next("cpu-host", /*wait=*/false, nullptr); });
  dying.join();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(250));

  const DeviceLock alive("cpu-host", false, nullptr); // this process: alive
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_THROW({ const DeviceLock next("cpu-host", /*wait=*/false, nullptr); }, DeviceUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::seconds(1));
}

TEST(DeviceLock, SecondTimerWaitsAndSaysSo) {
  const LockDir ld("device_wait");
  auto held = std::make_unique<DeviceLock>("cpu-host", false, nullptr);
  std::atomic<bool> got{false};
  std::atomic<bool> told{false};
  std::thread t([&] {
    const DeviceLock second("cpu-host", /*wait=*/true, [&](const std::string& pid) {
      EXPECT_EQ(pid, std::to_string(::getpid()));
      told = true;
    });
    got = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(got.load()) << "took a device that was held";
  held.reset();
  t.join();
  EXPECT_TRUE(told.load());
  EXPECT_TRUE(got.load());
}

} // namespace
} // namespace attn
