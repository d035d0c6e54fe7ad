#include "src/io/memory_left.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

namespace attn {
namespace {

// A "Name:   N kB" line of a /proc file, in bytes.
std::optional<int64_t> proc_kib(const char* path, const std::string& name) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(name + ":", 0) == 0) {
      std::istringstream in(line.substr(name.size() + 1));
      int64_t kib = 0;
      if (in >> kib) {
        return kib * 1024;
      }
    }
  }
  return std::nullopt;
}

} // namespace

std::optional<int64_t> memory_left_bytes() {
  std::optional<int64_t> left = proc_kib("/proc/meminfo", "MemAvailable");
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    const int64_t used = proc_kib("/proc/self/status", "VmSize").value_or(0);
    const int64_t room = std::max<int64_t>(0, int64_t(as.rlim_cur) - used);
    left = left ? std::min(*left, room) : room;
  }
  return left;
}

} // namespace attn
