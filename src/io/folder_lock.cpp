#include "src/io/folder_lock.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <stdexcept>
#include <sys/file.h>
#include <unistd.h>

#include "src/model/errors.h"

namespace attn {

namespace {
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
} // namespace

FolderLock::FolderLock(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / file_name()).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw InputError("cannot lock output folder '" + dir + "': " + std::strerror(errno));
  }
  // flock, not fcntl locks: it belongs to this open file, so a second lock in the same process
  // conflicts too, and closing another descriptor of the file does not drop it.
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string pid = holder_pid(fd_);
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK) {
      throw InputError("output folder '" + dir + "' is in use by another attn-tune process" +
                       (pid.empty() ? std::string() : " (pid " + pid + ")") +
                       "; wait for it to finish or choose another --out");
    }
    throw InputError("cannot lock output folder '" + dir + "': " + std::strerror(err));
  }
  // The pid only serves the message a second process prints; the lock holds without it.
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) {
    (void)!::pwrite(fd_, me.data(), me.size(), 0);
  }
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) {
    ::close(fd_); // releases the flock
  }
}

} // namespace attn
