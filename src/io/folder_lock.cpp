#include "src/io/folder_lock.h"

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <mutex>
#include <pthread.h>
#include <stdexcept>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/model/errors.h"

namespace attn {

namespace {

// The descriptors of the locks this process holds. A forked child (a sweep's worker) shares their
// open files, and a flock lasts while any descriptor of its open file does: a child would keep
// the folder locked after its parent was killed, until its own death lands, and a sweep resumed
// at once would be refused by a dead pid. So a child closes its copies at the fork (closing a
// copy never releases the lock; the parent's stays). Slots of atomics, not a container under a
// mutex: the child handler runs where another thread may have held any lock at the fork.
std::array<std::atomic<int>, 16> g_held;

void close_held_in_child() {
  for (std::atomic<int>& fd : g_held) {
    const int f = fd.exchange(-1);
    if (f >= 0) {
      ::close(f);
    }
  }
}

// Whether `fd` took a slot (it is then closed in children at the fork).
bool hold(int fd) {
  static std::once_flag once;
  std::call_once(once, [] {
    for (std::atomic<int>& f : g_held) {
      f.store(-1);
    }
    (void)::pthread_atfork(nullptr, nullptr, close_held_in_child);
  });
  for (std::atomic<int>& f : g_held) {
    int empty = -1;
    if (f.compare_exchange_strong(empty, fd)) {
      return true;
    }
  }
  // More locks than slots: this one stays inherited (held a little longer by a child, no worse).
  return false;
}

// Takes `fd` out of its slot; false when it is not there: in a forked child, whose copy the fork
// closed already (the number may name another file by now: the caller must not close it).
bool release(int fd) {
  for (std::atomic<int>& f : g_held) {
    int mine = fd;
    if (f.compare_exchange_strong(mine, -1)) {
      return true;
    }
  }
  return false;
}

// Closes a lock's descriptor unless a fork closed this process's copy already.
void close_lock(int fd, bool held) {
  if (!held || release(fd)) {
    ::close(fd);
  }
}

// The pid the holder wrote into the lock file, or "" when there is none (a lock taken by
// another tool, or a holder between open and write).
std::string holder_pid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s = n > 0 ? std::string(buf, std::size_t(n)) : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) {
    s.pop_back();
  }
  return s;
}

// Whether the pid a lock file names is no process any more: a sweep killed with -9 whose worker,
// which holds the device's lock in its name, has yet to receive the signal that ends it with the
// sweep (child_process.h). Not when the file names none, or a process of another user.
bool holder_gone(const std::string& pid) {
  if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) {
    return false;
  }
  return ::kill(pid_t(std::stol(pid)), 0) != 0 && errno == ESRCH;
}

// How long a --no-wait lock waits for a holder that is going down (holder_gone): the moments its
// worker takes to die.
constexpr double kDyingHolderSeconds = 2.0;

// Tries the lock on `fd` every 20 ms for `seconds`; whether it was taken.
bool lock_within(int fd, double seconds) {
  for (int i = 0; i < int(seconds * 50); ++i) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      return true;
    }
    ::usleep(20000);
  }
  return false;
}

void write_pid(int fd, pid_t pid = ::getpid()) {
  // The pid only serves the message a second process prints; the lock holds without it.
  const std::string me = std::to_string(pid) + "\n";
  if (::ftruncate(fd, 0) == 0) {
    (void)!::pwrite(fd, me.data(), me.size(), 0);
  }
}
} // namespace

FolderLock::FolderLock(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / file_name()).string();
  // A holder that is done removes the lock file before it lets go (remove_file), so a process that
  // opened the file before that and locked it after holds a file no longer in the folder, which a
  // third process would not see: such a lock is let go and the file opened again.
  for (int attempt = 0;; ++attempt) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      throw InputError("cannot lock output folder '" + dir + "': " + std::strerror(errno));
    }
    // flock, not fcntl locks: it belongs to this open file, so a second lock in the same process
    // conflicts too, and closing another descriptor of the file does not drop it.
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      std::string pid = holder_pid(fd_);
      // A holder that took the lock an instant ago may not have written its pid yet (two sweeps
      // started together): a moment for it, so that the refusal names it.
      for (int i = 0; err == EWOULDBLOCK && pid.empty() && i < 25; ++i) {
        ::usleep(4000);
        pid = holder_pid(fd_);
      }
      ::close(fd_);
      fd_ = -1;
      if (err == EWOULDBLOCK) {
        throw InputError("output folder '" + dir + "' is in use by another attn-tune process" +
                         (pid.empty() ? std::string() : " (pid " + pid + ")") +
                         "; wait for it to finish or choose another --out");
      }
      throw InputError("cannot lock output folder '" + dir + "': " + std::strerror(err));
    }
    struct stat held {};
    struct stat named {};
    if ((::fstat(fd_, &held) == 0 && ::stat(path.c_str(), &named) == 0 &&
         held.st_dev == named.st_dev && held.st_ino == named.st_ino) ||
        attempt == 100) {
      break;
    }
    ::close(fd_);
  }
  path_ = path;
  write_pid(fd_);
  held_ = hold(fd_);
}

void FolderLock::remove_file() {
  if (fd_ >= 0 && !path_.empty()) {
    ::unlink(path_.c_str());
    path_.clear();
  }
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) {
    close_lock(fd_, held_); // releases the flock
  }
}

std::string DeviceLock::lock_dir() {
  const char* d = std::getenv("ATTN_TUNE_LOCK_DIR");
  return d != nullptr && *d != '\0' ? d : "/tmp";
}

std::string DeviceLock::path_for(const std::string& device_key) {
  std::string name;
  for (char c : device_key) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.' || c == '_';
    name += keep ? c : '_';
  }
  return (std::filesystem::path(lock_dir()) / ("attn-tune-device-" + name + ".lock")).string();
}

DeviceLock::DeviceLock(const std::string& device_key, bool wait,
                       const std::function<void(const std::string&)>& waiting, pid_t owner_pid) {
  const std::string path = path_for(device_key);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd_ >= 0) {
    // Every user's sweeps must be able to take it: undo the umask on the file we may have made.
    (void)::fchmod(fd_, 0666);
  } else if (errno == EACCES) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC); // another user's file: flock needs no write
  }
  if (fd_ < 0) {
    throw DeviceUnavailable("cannot open the device lock '" + path + "': " + std::strerror(errno) +
                            " (set ATTN_TUNE_LOCK_DIR to a writable folder)");
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) {
      ::close(fd_);
      fd_ = -1;
      throw DeviceUnavailable("cannot lock '" + path + "': " + std::strerror(err));
    }
    const std::string pid = holder_pid(fd_);
    const bool gone = !wait && holder_gone(pid);
    const bool taken = gone && lock_within(fd_, kDyingHolderSeconds);
    if (!wait && !taken) {
      ::close(fd_);
      fd_ = -1;
      throw DeviceUnavailable(
          gone
              ? "the device lock " + path + " is held in the name of pid " + pid +
                    ", which is no longer running (by a process it left behind, or another "
                    "tool); run without --no-wait to wait for it"
              : "another attn-tune process" + (pid.empty() ? std::string() : " (pid " + pid + ")") +
                    " is timing on this device (lock " + path +
                    "); run without --no-wait to wait for it");
    }
    if (waiting && !taken) {
      waiting(pid);
    }
    while (!taken && ::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        const int e = errno;
        ::close(fd_);
        fd_ = -1;
        throw DeviceUnavailable("cannot lock '" + path + "': " + std::strerror(e));
      }
    }
  }
  // Fails quietly on a read-only descriptor: the lock holds regardless.
  write_pid(fd_, owner_pid > 0 ? owner_pid : ::getpid());
  held_ = hold(fd_);
}

DeviceLock::~DeviceLock() {
  if (fd_ >= 0) {
    close_lock(fd_, held_);
  }
}

} // namespace attn
