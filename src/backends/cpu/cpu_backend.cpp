// CPU backend: turns a problem and a configuration into a list of work items (sorted longest
// first so the pool's dynamic hand-out balances ragged batches), runs them, and times runs with
// a steady clock after touching a buffer twice the last-level cache.
#include "src/backends/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <thread>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "src/backends/cpu/cpu_info.h"
#include "src/backends/cpu/cpu_plan.h"
#include "src/backends/cpu/thread_pool.h"
#include "src/model/errors.h"

namespace attn {

namespace {

const std::set<std::string>& known_params(Family f) {
  static const std::set<std::string> v1 = {"split"};
  static const std::set<std::string> v2 = {"partition", "split"};
  static const std::set<std::string> pf = {"q_tile", "k_tile", "split"};
  return f == Family::decode_v1 ? v1 : f == Family::decode_v2 ? v2 : pf;
}

// The test hook behind ATTN_TUNE_TEST_FAULTS (docs/architecture.md): configurations that crash
// the way a broken kernel would, so that the tests can prove the sweep's and verify's fault
// isolation without a GPU. "segv:KEY;hang:KEY;abort:KEY", KEY a configuration key.
enum class InjectedFault { none, segv, hang, abort };

std::map<std::string, InjectedFault> injected_faults() {
  std::map<std::string, InjectedFault> out;
  const char* env = std::getenv("ATTN_TUNE_TEST_FAULTS");
  if (env == nullptr) {
    return out;
  }
  std::string spec = env;
  std::size_t pos = 0;
  while (pos <= spec.size()) {
    std::size_t end = spec.find(';', pos);
    if (end == std::string::npos) {
      end = spec.size();
    }
    const std::string item = spec.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) {
      continue;
    }
    const std::size_t colon = item.find(':');
    const std::string kind = item.substr(0, colon);
    const std::string key = colon == std::string::npos ? "" : item.substr(colon + 1);
    const InjectedFault f = kind == "segv"    ? InjectedFault::segv
                            : kind == "hang"  ? InjectedFault::hang
                            : kind == "abort" ? InjectedFault::abort
                                              : InjectedFault::none;
    if (f == InjectedFault::none || key.empty()) {
      throw InputError("ATTN_TUNE_TEST_FAULTS: '" + item +
                       "' is not segv:KEY, hang:KEY or abort:KEY (KEY a configuration key)");
    }
    out[key] = f;
  }
  return out;
}

[[noreturn]] void crash_as(InjectedFault f) {
  if (f == InjectedFault::abort) {
    std::abort();
  }
  if (f == InjectedFault::hang) {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::hours(1));
    }
  }
  // A real wild store, as a kernel bug would make (the address is hidden from the optimiser).
  volatile std::uintptr_t addr = 8;
  *reinterpret_cast<volatile int*>(addr) = 1;
  std::raise(SIGSEGV);
  std::abort();
}

class CpuPreparedRun final : public PreparedRun {
public:
  CpuPreparedRun(const Problem& pr, const KernelConfig& cfg, std::shared_ptr<ThreadPool> pool,
                 cpu::Isa isa, const DeviceInfo& info, InjectedFault fault)
      : pr_(pr), pool_(std::move(pool)), isa_(isa), info_(info), fault_(fault) {
    const AttnParams& p = pr_.params;
    const int H = p.num_heads;
    const int rows = pr_.num_rows();
    std::vector<int32_t> q_start, q_len, k_len;
    for (int b = 0; b < pr_.batch; ++b) {
      q_start.push_back(pr_.q_start(b));
      q_len.push_back(pr_.q_len(b));
      k_len.push_back(pr_.k_len(b));
    }
    out_ = HostTensor(p.dtype, {rows, H, p.head_dim});
    lse_.assign(std::size_t(rows) * H, 0.0f);

    cpu::KernelArgs a;
    a.dtype = p.dtype;
    a.num_heads = H;
    a.num_kv_heads = p.num_kv_heads;
    a.head_dim = p.head_dim;
    a.block_size = p.block_size;
    a.group = p.group_size();
    a.scale = float(p.effective_scale());
    a.softcap = float(p.softcap);
    a.mask = {p.causal ? 1 : 0, p.window_left, p.window_right};
    a.query = pr_.query.raw();
    a.key_cache = pr_.key_cache.raw();
    a.value_cache = pr_.value_cache.raw();
    a.block_tables = pr_.block_tables.data();
    a.max_blocks_per_seq = pr_.max_blocks_per_seq;
    a.out = out_.raw();
    a.lse = lse_.data();

    cpu::PlanParams pp;
    pp.family = cfg.family;
    pp.split = cfg.get("split", 1);
    pp.partition = cfg.get("partition", 512);
    pp.q_tile = cfg.get("q_tile", 32);
    pp.k_tile = cfg.get("k_tile", 64);
    if (cfg.family == Family::decode_v2) {
      partials_.resize(
          cpu::partial_floats(pr_.batch, H, p.head_dim, pr_.max_k_len(), pp.partition));
    }
    plan_.emplace(isa_, a, pp, std::move(q_start), std::move(q_len), std::move(k_len),
                  partials_.data(), pool_->size());
  }

  void poison_outputs() override {
    poison(out_);
    poison(lse_);
    // Partials too: a reduce that read a partition nobody wrote would produce NaN, not a
    // plausible number.
    poison(partials_);
  }

  void run() override {
    if (fault_ != InjectedFault::none) {
      crash_as(fault_);
    }
    plan_->run(*pool_);
  }

  RunOutput download() override { return {out_, lse_}; }

  TimingResult time(const TimingOptions& opt) override {
    std::vector<HostRange> touched = problem_read_ranges(pr_);
    touched.push_back({out_.raw(), out_.data.size()});
    touched.push_back({lse_.data(), lse_.size() * sizeof(float)});
    touched.push_back({partials_.data(), partials_.size() * sizeof(float)});
    return time_host_call([this] { run(); }, opt, info_.l2_bytes,
                          "steady_clock, " + std::to_string(pool_->size()) + " threads, " +
                              cpu::isa_name(isa_) + " kernels",
                          touched);
  }

private:
  Problem pr_; // our copy of the problem: the "upload"
  std::shared_ptr<ThreadPool> pool_;
  cpu::Isa isa_;
  DeviceInfo info_;
  HostTensor out_;
  std::vector<float> lse_;
  std::vector<float> partials_;
  std::optional<cpu::CallPlan> plan_;
  InjectedFault fault_ = InjectedFault::none;
};

class CpuBackend final : public Backend {
public:
  CpuBackend(const BackendOptions& opt, cpu::Isa isa)
      : info_(cpu_device_info(opt.threads)), isa_(isa),
        pool_(std::make_shared<ThreadPool>(info_.threads)), faults_(injected_faults()) {}

  const DeviceInfo& info() const override { return info_; }

  std::vector<KernelConfig> config_space(Family f, const AttnParams& p) const override {
    std::vector<KernelConfig> out;
    for (int split : {0, 1}) {
      if (f == Family::decode_v1) {
        out.push_back({f, {{"split", split}}});
      } else if (f == Family::decode_v2) {
        for (int part : {256, 512, 1024}) {
          out.push_back({f, {{"partition", part}, {"split", split}}});
        }
      } else {
        for (int qt : {16, 32, 64}) {
          for (int kt : {32, 64, 128}) {
            out.push_back({f, {{"q_tile", qt}, {"k_tile", kt}, {"split", split}}});
          }
        }
      }
    }
    return out;
  }

  std::optional<std::string> can_run(const KernelConfig& cfg, const Problem& pr) const override {
    const char* fam = family_name(cfg.family);
    if (auto why = phase_mismatch(cfg.family, pr.phase)) {
      return why;
    }
    for (const auto& [k, v] : cfg.params) {
      if (!known_params(cfg.family).count(k)) {
        return "parameter '" + k + "' does not apply to " + fam + " on the CPU";
      }
    }
    const int split = cfg.get("split", 1);
    if (split != 0 && split != 1) {
      return "split=" + std::to_string(split) + " must be 0 (per query head) or 1 (per KV head)";
    }
    if (cfg.family == Family::decode_v2) {
      const int part = cfg.get("partition", 512);
      const int bs = pr.params.block_size;
      if (part <= 0 || part > kCpuMaxPartition) {
        return "partition=" + std::to_string(part) + " is out of range (1 to " +
               std::to_string(kCpuMaxPartition) + ")";
      }
      if (part % bs != 0) {
        return "partition=" + std::to_string(part) + " is not a multiple of block_size " +
               std::to_string(bs);
      }
    }
    if (cfg.family == Family::prefill) {
      const int qt = cfg.get("q_tile", 32);
      const int kt = cfg.get("k_tile", 64);
      if (qt <= 0 || qt > kCpuMaxQTile) {
        return "q_tile=" + std::to_string(qt) + " is out of range (1 to " +
               std::to_string(kCpuMaxQTile) + ")";
      }
      if (kt <= 0 || kt > kCpuMaxKTile) {
        return "k_tile=" + std::to_string(kt) + " is out of range (1 to " +
               std::to_string(kCpuMaxKTile) + ")";
      }
    }
    return std::nullopt;
  }

  std::unique_ptr<PreparedRun> prepare(const Problem& pr, const KernelConfig& cfg) override {
    if (pr.kv_layout != KvLayout::HND) { // the CPU kernels read HND pages: rearrange once here
      return prepare(with_kv_layout(pr, KvLayout::HND), cfg);
    }
    pr.validate();
    if (auto why = can_run(cfg, pr)) {
      throw InputError("cannot run " + cfg.key() + " on the CPU: " + *why);
    }
    const auto f = faults_.find(cfg.key());
    return std::make_unique<CpuPreparedRun>(pr, cfg, pool_, isa_, info_,
                                            f == faults_.end() ? InjectedFault::none : f->second);
  }

private:
  DeviceInfo info_;
  cpu::Isa isa_;
  std::shared_ptr<ThreadPool> pool_;
  std::map<std::string, InjectedFault> faults_;
};

} // namespace

namespace {

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
                                  std::size_t(p.head_dim) * dtype_size(p.dtype);
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

TimingResult time_host_call(const std::function<void()>& call, const TimingOptions& opt,
                            int64_t llc_bytes, std::string method,
                            const std::vector<HostRange>& touched) {
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
    method += ", the " + std::to_string((total + (1 << 20) - 1) >> 20) +
              " MiB it touches flushed from every cache level (CLFLUSHOPT) before each rep";
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
  return measure(one_rep, call, opt, method);
}

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt) {
  return make_cpu_backend(opt, cpu::selected_isa());
}

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt, cpu::Isa isa) {
  if (!cpu::isa_supported(isa)) {
    throw DeviceUnavailable(std::string("this processor cannot run the ") + cpu::isa_name(isa) +
                            " build of the CPU kernels");
  }
  if (opt.threads < 0) {
    throw InputError("threads " + std::to_string(opt.threads) + " must be >= 0 (0: all)");
  }
  return std::make_unique<CpuBackend>(opt, isa);
}

} // namespace attn
