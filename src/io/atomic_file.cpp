#include "src/io/atomic_file.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

#include "src/model/errors.h"

namespace attn {

void write_file_atomically(const std::string& path, const void* bytes, std::size_t size) {
  // Same folder as the target, so that the rename cannot cross file systems.
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    throw InputError("cannot create a file next to " + path + ": " + std::strerror(errno));
  }
  ::fchmod(fd, 0644); // mkstemp makes it private; a result file is meant to be shared
  auto fail = [&](const char* what, bool close_fd) {
    const std::string reason = std::strerror(errno);
    if (close_fd) {
      ::close(fd);
    }
    ::unlink(tmp.c_str());
    throw std::runtime_error(std::string(what) + " " + tmp + ": " + reason);
  };
  const char* p = static_cast<const char*>(bytes);
  std::size_t left = size;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      fail("cannot write", true);
    }
    p += n;
    left -= std::size_t(n);
  }
  if (::fsync(fd) != 0) {
    fail("cannot flush", true);
  }
  if (::close(fd) != 0) {
    fail("cannot close", false);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw InputError("cannot write " + path + ": " + reason);
  }
}

void write_file_atomically(const std::string& path, std::string_view text) {
  write_file_atomically(path, text.data(), text.size());
}

void write_json_atomically(const std::string& path, const nlohmann::json& j) {
  write_file_atomically(path, j.dump(1) + "\n");
}

} // namespace attn
