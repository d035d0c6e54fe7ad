#include "src/io/atomic_file.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <memory>
#include <random>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

#include "src/io/stop_signals.h"
#include "src/model/errors.h"

namespace attn {

namespace fs = std::filesystem;

namespace {

// A temporary file written for an atomic write: its name, removed if the command is told to stop
// before it is renamed into place.
struct Temporary {
  std::string path;
  std::unique_ptr<RemovedOnStop> removed_on_stop;
};

// The first half of an atomic write: `bytes` in a fsynced temporary file next to `path` (same
// folder, so that the rename cannot cross file systems).
Temporary write_temporary(const std::string& path, const void* bytes, std::size_t size) {
  std::string tmp = path + ".tmp.XXXXXX";
  int fd = -1;
  std::unique_ptr<RemovedOnStop> guard;
  {
    const StopSignalsHeld held; // made and registered as one step
    fd = ::mkstemp(tmp.data());
    if (fd >= 0) {
      guard = std::make_unique<RemovedOnStop>(tmp);
    }
  }
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
  return {tmp, std::move(guard)};
}

// The second half: the temporary file renamed over `path`.
void put_in_place(const std::string& tmp, const std::string& path) {
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw InputError("cannot write " + path + ": " + reason);
  }
}

} // namespace

void check_can_write(const std::string& path) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    throw InputError("cannot create a file next to " + path + ": " + std::strerror(errno));
  }
  ::close(fd);
  ::unlink(tmp.c_str());
}

void write_file_atomically(const std::string& path, const void* bytes, std::size_t size) {
  put_in_place(write_temporary(path, bytes, size).path, path);
}

void write_files_atomically(const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<Temporary> temps;
  try {
    for (const auto& [path, bytes] : files) {
      temps.push_back(write_temporary(path, bytes.data(), bytes.size()));
    }
  } catch (...) {
    for (const Temporary& t : temps) {
      ::unlink(t.path.c_str());
    }
    throw;
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    put_in_place(temps[i].path, files[i].first);
  }
}

void write_file_atomically(const std::string& path, std::string_view text) {
  write_file_atomically(path, text.data(), text.size());
}

void remove_stale_temporaries(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    const std::size_t at = n.rfind(".tmp.");
    if (at == std::string::npos || at == 0 || n.size() - at != 5 + 6 || !e.is_regular_file(ec) ||
        !std::all_of(n.begin() + long(at) + 5, n.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; })) {
      continue;
    }
    fs::remove(e.path(), ec);
  }
}

void write_json_atomically(const std::string& path, const nlohmann::json& j) {
  write_file_atomically(path, j.dump(1) + "\n");
}

namespace {

constexpr const char* kCurrent = ".attn-tune-current";
constexpr const char* kGenPrefix = ".attn-tune-gen-";

void fsync_dir(const fs::path& d) {
  const int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)::fsync(fd);
    ::close(fd);
  }
}

// A new, empty generation folder in `dir`; its name (not the path).
std::string make_generation(const fs::path& dir) {
  // Not mkdtemp, which makes the folder private: the results and table behind the links are
  // meant to be read by others, as a plain sweep's files are, so the folder gets mkdir's 0777
  // less the umask. The name is mkdtemp's pattern, drawn here.
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device rd;
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string name = kGenPrefix;
    for (int i = 0; i < 6; ++i) {
      name += kChars[rd() % (sizeof kChars - 1)];
    }
    if (::mkdir((dir / name).c_str(), 0777) == 0) {
      return name;
    }
    if (errno != EEXIST) {
      break;
    }
  }
  throw InputError("cannot create a folder in " + dir.string() + ": " + std::strerror(errno));
}

// Points the link `dir`/`name` at `target` in one rename (a new link, then renamed over).
void switch_link(const fs::path& dir, const std::string& name, const std::string& target) {
  const fs::path link = dir / name;
  const fs::path tmp = dir / (name + ".tmp." + std::to_string(::getpid()));
  ::unlink(tmp.c_str());
  if (::symlink(target.c_str(), tmp.c_str()) != 0 || std::rename(tmp.c_str(), link.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot switch " + link.string() + ": " + reason);
  }
}

std::string link_target(const fs::path& p) {
  std::error_code ec;
  return fs::is_symlink(fs::symlink_status(p, ec)) ? fs::read_symlink(p, ec).string() : "";
}

} // namespace

void replace_files_together(const std::string& dir_text,
                            const std::vector<std::pair<std::string, std::string>>& files) {
  const fs::path dir(dir_text);
  // Until the switch, a stop removes the new generation: its files, then the folder (a merge
  // stopped midway left it for the next merge to remove, an outside audit saw).
  std::string gen;
  std::vector<std::unique_ptr<RemovedOnStop>> until_switch;
  {
    const StopSignalsHeld held; // made and registered as one step
    gen = make_generation(dir);
    until_switch.push_back(
        std::make_unique<RemovedOnStop>((dir / gen).string(), RemovedOnStop::Kind::folder));
  }
  for (const auto& f : files) {
    until_switch.push_back(std::make_unique<RemovedOnStop>((dir / gen / f.first).string()));
  }
  try {
    for (const auto& [name, bytes] : files) {
      write_file_atomically((dir / gen / name).string(), bytes);
    }
  } catch (...) {
    std::error_code ec;
    fs::remove_all(dir / gen, ec);
    throw;
  }
  fsync_dir(dir / gen);

  // Once per folder: each name becomes a link through kCurrent, showing the files it showed.
  const auto through_current = [](const std::string& name) {
    return std::string(kCurrent) + "/" + name;
  };
  bool linked = !link_target(dir / kCurrent).empty();
  for (const auto& f : files) {
    linked = linked && link_target(dir / f.first) == through_current(f.first);
  }
  if (!linked) {
    const std::string kept = make_generation(dir);
    for (const auto& f : files) {
      std::error_code ec;
      const fs::path now = fs::canonical(dir / f.first, ec); // what a reader sees now
      if (!ec && ::link(now.c_str(), (dir / kept / f.first).c_str()) != 0) {
        fs::copy_file(now, dir / kept / f.first, ec);
      }
    }
    fsync_dir(dir / kept);
    switch_link(dir, kCurrent, kept);
    for (const auto& f : files) {
      if (link_target(dir / f.first) != through_current(f.first)) {
        switch_link(dir, f.first, through_current(f.first));
      }
    }
  }
  // The switch: every name now shows the new generation, which a stop then leaves in place, and
  // the one they showed before is removed below; a stop during that removal finishes it (its
  // files, then its folder), so it is not left for the next writer.
  std::vector<std::unique_ptr<RemovedOnStop>> after_switch;
  {
    const StopSignalsHeld held;
    const std::string old = link_target(dir / kCurrent);
    switch_link(dir, kCurrent, gen);
    until_switch.clear();
    if (old.rfind(kGenPrefix, 0) == 0 && old.find('/') == std::string::npos && old != gen) {
      after_switch.push_back(
          std::make_unique<RemovedOnStop>((dir / old).string(), RemovedOnStop::Kind::folder));
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(dir / old, ec)) {
        after_switch.push_back(std::make_unique<RemovedOnStop>(e.path().string()));
      }
    }
  }
  fsync_dir(dir);

  // What earlier writers killed midway left: older generations, and the temporary links and
  // files of the names this function manages (the caller holds the folder's lock).
  const auto stale = [&](const std::string& n) {
    if (n.rfind(kGenPrefix, 0) == 0) {
      return n != gen;
    }
    if (n.rfind(std::string(kCurrent) + ".tmp.", 0) == 0) {
      return true;
    }
    return std::any_of(files.begin(), files.end(), [&](const auto& f) {
      return n.rfind(f.first + ".tmp.", 0) == 0;
    });
  };
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (stale(e.path().filename().string())) {
      std::error_code rm;
      fs::remove_all(e.path(), rm);
    }
  }
}

} // namespace attn
