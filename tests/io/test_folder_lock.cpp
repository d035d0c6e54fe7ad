// FolderLock: a second lock on a held folder fails at once naming the holder's pid, in this
// process as in another; the lock is free again once its holder is gone.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "src/io/folder_lock.h"
#include "src/model/errors.h"

namespace attn {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() /
               ("attn_test_lock_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(FolderLock, SecondLockFailsNamingTheHolder) {
  const fs::path dir = fresh_dir("held");
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
  const fs::path dir = fresh_dir("fork");
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

TEST(FolderLock, MissingFolderIsAnInputError) {
  EXPECT_THROW({ const FolderLock l("/nonexistent/attn-tune/out"); }, InputError);
}

} // namespace
} // namespace attn
