// The host harness (host_run.h): the read set of a problem, the CLFLUSHOPT flush or the
// flush buffer, the timed loop around a host call, and the run base class.
#include "src/backends/host/host_run.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <mutex>
#include <optional>
#include <sched.h>
#include <thread>
#include <utility>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "src/model/errors.h"

namespace attn {

namespace {

// The seconds this process's threads have spent ready to run but waiting for a CPU, summed over
// its threads (the second field of Linux's /proc/self/task/<tid>/schedstat, in ns); empty where
// that file cannot be read. A thread that ended is no longer counted, so only the difference over
// a span in which the same threads live says anything.
std::optional<double> cpu_wait_seconds() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) {
    return std::nullopt;
  }
  double sum = 0.0;
  bool any = false;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') {
      continue;
    }
    const std::string path = std::string("/proc/self/task/") + e->d_name + "/schedstat";
    if (FILE* f = std::fopen(path.c_str(), "re")) {
      unsigned long long ran_ns = 0;
      unsigned long long waited_ns = 0;
      if (std::fscanf(f, "%llu %llu", &ran_ns, &waited_ns) == 2) {
        sum += double(waited_ns) * 1e-9;
        any = true;
      }
      std::fclose(f);
    }
  }
  closedir(dir);
  return any ? std::optional<double>(sum) : std::nullopt;
}

void add_range(std::vector<HostRange>& out, const void* data, std::size_t bytes) {
  if (data != nullptr && bytes > 0) {
    out.push_back({data, bytes});
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
bool has_clflushopt() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (b & (1u << 23)) != 0;
}

// CLFLUSHOPT, unlike CLFLUSH, is not ordered with other flushes, so a run of them streams
// (measured here: 64 MiB in about 10 ms, against about 300 ms with CLFLUSH); the fence orders the
// flushes before the timed call.
__attribute__((target("clflushopt"))) void flush_lines(const std::vector<HostRange>& ranges) {
  for (const HostRange& r : ranges) {
    const auto begin = reinterpret_cast<std::uintptr_t>(r.data) & ~std::uintptr_t(63);
    const auto end = reinterpret_cast<std::uintptr_t>(r.data) + r.bytes;
    for (std::uintptr_t line = begin; line < end; line += 64) {
      _mm_clflushopt(reinterpret_cast<void*>(line));
    }
  }
  _mm_mfence();
}
#endif

} // namespace

std::vector<HostRange> problem_read_ranges(const Problem& pr) {
  std::vector<HostRange> out;
  const AttnParams& p = pr.params;
  add_range(out, pr.query.raw(), pr.query.data.size());
  // Whole blocks that some sequence reads, each once.
  std::vector<int32_t> blocks;
  for (int b = 0; b < pr.batch; ++b) {
    const int used = (pr.k_len(b) + p.block_size - 1) / p.block_size;
    for (int i = 0; i < used; ++i) {
      blocks.push_back(pr.block_tables[std::size_t(b) * pr.max_blocks_per_seq + i]);
    }
  }
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  const std::size_t block_bytes = std::size_t(p.num_kv_heads) * std::size_t(p.block_size) *
                                  std::size_t(p.head_dim) * dtype_size(p.cache_dtype());
  for (const HostTensor* cache : {&pr.key_cache, &pr.value_cache}) {
    const auto* base = static_cast<const unsigned char*>(cache->raw());
    for (std::size_t i = 0; i < blocks.size();) {
      std::size_t j = i + 1; // adjacent blocks as one range
      while (j < blocks.size() && blocks[j] == blocks[j - 1] + 1) {
        ++j;
      }
      add_range(out, base + std::size_t(blocks[i]) * block_bytes, (j - i) * block_bytes);
      i = j;
    }
  }
  add_range(out, pr.block_tables.data(), pr.block_tables.size() * sizeof(int32_t));
  add_range(out, pr.context_lens.data(), pr.context_lens.size() * sizeof(int32_t));
  add_range(out, pr.cu_seqlens_q.data(), pr.cu_seqlens_q.size() * sizeof(int32_t));
  add_range(out, pr.cu_seqlens_k.data(), pr.cu_seqlens_k.size() * sizeof(int32_t));
  return out;
}

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    return std::max(1, CPU_COUNT(&set));
  }
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

TimingResult time_host_call(const std::function<void()>& call, const TimingOptions& opt,
                            int64_t llc_bytes, std::string method,
                            const std::vector<HostRange>& touched, int threads) {
  if (opt.mode == TimingMode::graph) {
    throw InputError("--timing graph needs a CUDA device; host-memory kernels have no graphs");
  }
  bool flush_touched = false;
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool clflushopt = has_clflushopt();
  flush_touched = opt.flush_cache && clflushopt && !touched.empty();
#endif
  // Otherwise twice the last-level cache, so no K/V line of the previous rep survives. One buffer
  // per thread for the whole process: allocating (and faulting in) hundreds of MiB for every
  // measurement cost more than many of the measurements.
  static thread_local std::vector<unsigned char> flush_buffer;
  volatile unsigned sink = 0;
  const auto bytes = std::size_t(std::max<int64_t>(llc_bytes, 1 << 20)) * 2;
  if (flush_touched) {
    std::size_t total = 0;
    for (const HostRange& r : touched) {
      total += r.bytes;
    }
    method += ", the " + mib_text(total) +
              " it touches flushed from every cache level (CLFLUSHOPT) before each rep";
  } else if (opt.flush_cache) {
    if (flush_buffer.size() < bytes) {
      flush_buffer.assign(bytes, 0);
    }
    method += ", " + std::to_string(bytes >> 20) + " MiB buffer touched before each rep";
  } else {
    method += ", warm cache";
  }
  auto one_rep = [&] {
    if (flush_touched) {
#if defined(__x86_64__) && defined(__GNUC__)
      flush_lines(touched);
#endif
    } else if (opt.flush_cache) {
      // Read-modify-write one byte per cache line: every line is loaded and dirtied, evicting
      // whatever the previous rep left.
      unsigned char* p = flush_buffer.data();
      for (std::size_t i = 0; i < bytes; i += 64) {
        p[i] = static_cast<unsigned char>(p[i] + 1);
      }
      sink = sink + p[bytes / 2];
    }
    const auto t0 = std::chrono::steady_clock::now();
    call();
    const auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double>(t1 - t0).count();
  };
  // Each measurement with the waits for a CPU it saw; one that waited above the limit is made
  // again, and the one that waited least is kept.
  std::optional<TimingResult> kept;
  const int attempts = threads > usable_cpus() ? 1 : 1 + kCpuWaitRetries;
  for (int attempt = 1; attempt <= attempts; ++attempt) {
    const std::optional<double> waited0 = cpu_wait_seconds();
    const auto start = std::chrono::steady_clock::now();
    TimingResult r = measure(one_rep, call, opt, method);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::optional<double> waited1 = cpu_wait_seconds();
    if (!waited0 || !waited1 || wall <= 0) {
      return r; // no schedstat here: nothing to judge by
    }
    r.cpu_wait_share = std::max(0.0, *waited1 - *waited0) / wall;
    if (!kept || *r.cpu_wait_share < *kept->cpu_wait_share) {
      kept = std::move(r);
    }
    kept->attempts = attempt;
    if (*kept->cpu_wait_share <= kCpuWaitLimit) {
      break;
    }
  }
  return *kept;
}

namespace {

// The copy of the problem that the last host run to end held, kept for the next run. A sweep
// prepares every configuration of a workload in turn, each with its own copy of the same problem.
// Copied into vectors that already hold the memory, the copy writes pages already mapped; fresh
// vectors of a few hundred megabytes take a page fault (and the kernel's zeroing) per 4 KiB,
// which was most of a host run's set-up: 18% of the CPU time of a sweep of one 16 x 16384-token
// workload (8 configurations, 1.6 GB of caches each), where the whole copy had to be paid again
// for every configuration.
struct Spare {
  std::mutex mutex;
  Problem problem; // guarded by mutex
};
// Never destroyed, so that a run ending during the program's exit still finds it.
Spare& spare() {
  static Spare* const s = new Spare;
  return *s;
}

Problem take_spare() {
  Spare& s = spare();
  const std::lock_guard<std::mutex> lock(s.mutex);
  return std::exchange(s.problem, Problem{});
}

void keep_spare(Problem&& p) {
  Spare& s = spare();
  const std::lock_guard<std::mutex> lock(s.mutex);
  s.problem = std::move(p); // the most recent: the next run is most likely of the same workload
}

// Frees dst's buffer where it cannot hold src's bytes, so that a copy assignment does not hold the
// old buffer and the new one at once; where it can, the assignment copies into it.
void drop_if_short(std::vector<std::byte>& dst, const std::vector<std::byte>& src) {
  if (dst.capacity() < src.size()) {
    std::vector<std::byte>().swap(dst);
  }
}

} // namespace

HostRun::HostRun(const Problem& pr, bool writes_lse, int64_t llc_bytes)
    : pr_(take_spare()), writes_lse_(writes_lse), llc_bytes_(llc_bytes) {
  drop_if_short(pr_.key_cache.data, pr.key_cache.data);
  drop_if_short(pr_.value_cache.data, pr.value_cache.data);
  drop_if_short(pr_.query.data, pr.query.data);
  pr_ = pr;
  const AttnParams& p = pr_.params;
  out_ = HostTensor(p.dtype, {pr_.num_rows(), p.num_heads, p.head_dim});
  lse_.assign(std::size_t(pr_.num_rows()) * p.num_heads, 0.0f);
  poison(out_);
  poison(lse_);
  out_mem_ = HostBuffer(out_.data.size() + kOutputGuardBytes);
  lse_mem_ = HostBuffer(lse_.size() * sizeof(float) + kOutputGuardBytes);
}

HostRun::~HostRun() { keep_spare(std::move(pr_)); }

bool HostRun::negate_inputs() {
  attn::negate_inputs(pr_); // (the member hides the free function)
  return true;
}

bool HostRun::rescale_inputs(bool back) { return attn::rescale_inputs(pr_, back); }

uint64_t input_digest(const void* data, std::size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(data);
  uint64_t h = 0x9e3779b97f4a7c15ull ^ bytes;
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, b + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < bytes; ++i) {
    h = (h ^ b[i]) * 0x100000001b3ull;
  }
  return h;
}

std::vector<std::pair<std::string, uint64_t>> HostRun::input_digests() const {
  return {{"the query", input_digest(pr_.query.data)},
          {"the key cache", input_digest(pr_.key_cache.data)},
          {"the value cache", input_digest(pr_.value_cache.data)},
          {"the block tables", input_digest(pr_.block_tables)},
          {"the lengths", input_digest(pr_.context_lens) ^ input_digest(pr_.cu_seqlens_q) * 3 ^
                              input_digest(pr_.cu_seqlens_k) * 5},
          {"the fp8 scales", input_digest(pr_.k_scale) ^ input_digest(pr_.v_scale) * 3}};
}

void HostRun::poison_outputs() {
  auto* out = static_cast<unsigned char*>(out_mem_.get());
  std::memcpy(out, out_.raw(), out_.data.size());
  std::memset(out + out_.data.size(), kOutputGuardByte, kOutputGuardBytes);
  auto* lse = static_cast<unsigned char*>(lse_mem_.get());
  std::memcpy(lse, lse_.data(), lse_.size() * sizeof(float));
  std::memset(lse + lse_.size() * sizeof(float), kOutputGuardByte, kOutputGuardBytes);
  poison_scratch();
}

RunOutput HostRun::download() {
  const auto* out = static_cast<const unsigned char*>(out_mem_.get());
  const auto* lse = static_cast<const unsigned char*>(lse_mem_.get());
  RunOutput r{out_, lse_, writes_lse_, ""}; // their shapes; the kernel's bytes follow
  std::memcpy(r.out.raw(), out, out_.data.size());
  std::memcpy(r.lse.data(), lse, lse_.size() * sizeof(float));
  r.overrun = guard_overrun(out + out_.data.size(), lse + lse_.size() * sizeof(float));
  return r;
}

TimingResult HostRun::time(const TimingOptions& opt) {
  std::vector<HostRange> touched = problem_read_ranges(pr_);
  touched.push_back({out_mem_.get(), out_.data.size()});
  touched.push_back({lse_mem_.get(), lse_.size() * sizeof(float)});
  for (const HostRange& r : scratch()) {
    touched.push_back(r);
  }
  return time_host_call([this] { run(); }, opt, llc_bytes_, method(), touched, call_threads());
}

} // namespace attn
