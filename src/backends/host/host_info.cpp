#include "src/backends/host/host_info.h"

#include <fstream>
#include <string>
#include <thread>
#include <unistd.h>

namespace attn {

namespace {
std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        auto s = line.substr(colon + 1);
        s.erase(0, s.find_first_not_of(" \t"));
        return s;
      }
    }
  }
  return "unknown CPU";
}

int64_t last_level_cache_bytes() {
  int64_t best = 0;
  for (int idx = 0; idx < 8; ++idx) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(idx) + "/size");
    std::string s;
    if (!(f >> s)) {
      break;
    }
    int64_t v = std::stoll(s);
    if (s.back() == 'K') {
      v *= 1024;
    } else if (s.back() == 'M') {
      v *= 1024 * 1024;
    }
    best = std::max(best, v);
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (best == 0) {
    best = std::max<long>(0, sysconf(_SC_LEVEL3_CACHE_SIZE));
  }
#endif
  return best > 0 ? best : 32 << 20; // unknown: assume a generous 32 MiB
}
} // namespace

DeviceInfo cpu_device_info(int threads) {
  DeviceInfo d;
  d.backend = "cpu";
  d.id = "cpu";
  d.name = cpu_model_name();
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  d.threads = threads > 0 ? threads : hw;
  d.sm_count = d.threads;
  d.memory_bytes = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGE_SIZE));
  d.l2_bytes = last_level_cache_bytes();
  return d;
}

} // namespace attn
