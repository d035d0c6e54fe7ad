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
#include <set>
#include <thread>

#include "src/backends/cpu/cpu_info.h"
#include "src/backends/cpu/thread_pool.h"
#include "src/model/errors.h"

namespace attn {

namespace {

namespace am = attn_math;

// Keys per tile in decode: a K (then V) tile of 32 KiB of fp32 stays in L1/L2.
int decode_k_tile(int head_dim) { return std::clamp(8192 / head_dim, 16, 256); }

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
      : pr_(pr), cfg_(cfg), pool_(std::move(pool)), isa_(isa), info_(info), fault_(fault) {
    const AttnParams& p = pr_.params;
    const int H = p.num_heads;
    const int G = p.group_size();
    const int rows = pr_.num_rows();
    split_ = cfg_.get("split", 1);
    for (int b = 0; b < pr_.batch; ++b) {
      q_start_.push_back(pr_.q_start(b));
      q_len_.push_back(pr_.q_len(b));
      k_len_.push_back(pr_.k_len(b));
    }
    out_ = HostTensor(p.dtype, {rows, H, p.head_dim});
    lse_.assign(std::size_t(rows) * H, 0.0f);

    a_.dtype = p.dtype;
    a_.num_heads = H;
    a_.num_kv_heads = p.num_kv_heads;
    a_.head_dim = p.head_dim;
    a_.block_size = p.block_size;
    a_.group = G;
    a_.scale = float(p.effective_scale());
    a_.softcap = float(p.softcap);
    a_.mask = {p.causal ? 1 : 0, p.window_left, p.window_right};
    a_.query = pr_.query.raw();
    a_.key_cache = pr_.key_cache.raw();
    a_.value_cache = pr_.value_cache.raw();
    a_.block_tables = pr_.block_tables.data();
    a_.max_blocks_per_seq = pr_.max_blocks_per_seq;
    a_.seq_q_start = q_start_.data();
    a_.seq_q_len = q_len_.data();
    a_.seq_k_len = k_len_.data();
    a_.out = out_.raw();
    a_.lse = lse_.data();

    const int heads_per_item = split_ ? G : 1;
    const int item_groups = H / heads_per_item;
    int max_rows = 1;
    if (cfg_.family == Family::prefill) {
      const int q_tile = cfg_.get("q_tile", 32);
      k_tile_ = cfg_.get("k_tile", 64);
      max_rows = std::max(1, std::min(q_tile, pr_.max_q_len()));
      for (int b = 0; b < pr_.batch; ++b) {
        for (int r0 = 0; r0 < q_len_[b]; r0 += q_tile) {
          const int r1 = std::min(q_len_[b], r0 + q_tile);
          for (int g = 0; g < item_groups; ++g) {
            add_item({b, r0, r1, g * heads_per_item, heads_per_item, -1});
          }
        }
      }
    } else {
      k_tile_ = decode_k_tile(p.head_dim);
      int parts = 0;
      if (cfg_.family == Family::decode_v2) {
        a_.partition = cfg_.get("partition", 512);
        a_.max_parts = std::max(1, am::num_partitions(pr_.max_k_len(), a_.partition));
        const std::size_t n = std::size_t(pr_.batch) * H * a_.max_parts;
        part_m_.resize(n);
        part_l_.resize(n);
        part_o_.resize(n * std::size_t(p.head_dim));
        a_.part_m = part_m_.data();
        a_.part_l = part_l_.data();
        a_.part_o = part_o_.data();
      }
      for (int b = 0; b < pr_.batch; ++b) {
        parts = cfg_.family == Family::decode_v2 && k_len_[b] > 0
                    ? am::num_partitions(k_len_[b], a_.partition)
                    : 0;
        for (int g = 0; g < item_groups; ++g) {
          if (cfg_.family == Family::decode_v1 || parts == 0) {
            // v1, or a v2 sequence with no keys: one item writes out and lse directly.
            add_item({b, 0, 1, g * heads_per_item, heads_per_item, -1});
          } else {
            for (int t = 0; t < parts; ++t) {
              add_item({b, 0, 1, g * heads_per_item, heads_per_item, t});
            }
          }
        }
      }
      if (cfg_.family == Family::decode_v2) {
        for (int b = 0; b < pr_.batch; ++b) {
          if (k_len_[b] > 0) {
            reduce_seqs_.push_back(b);
          }
        }
      }
    }
    // Longest first: with dynamic hand-out this bounds the tail by the shortest items.
    std::vector<std::size_t> order(items_.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
      order[i] = i;
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t x, std::size_t y) { return cost_[x] > cost_[y]; });
    std::vector<cpu::WorkItem> sorted;
    sorted.reserve(items_.size());
    for (std::size_t i : order) {
      sorted.push_back(items_[i]);
    }
    items_ = std::move(sorted);

    scratch_.resize(std::size_t(pool_->size()));
    for (auto& s : scratch_) {
      cpu::size_scratch(s, max_rows, heads_per_item, p.head_dim, k_tile_);
    }
    reduce_tmp_.resize(std::size_t(pool_->size()) * p.head_dim);
  }

  void poison_outputs() override {
    poison(out_);
    poison(lse_);
    // Partials too: a reduce that read a partition nobody wrote would produce NaN, not a
    // plausible number.
    poison(part_m_);
    poison(part_l_);
    poison(part_o_);
  }

  void run() override {
    if (fault_ != InjectedFault::none) {
      crash_as(fault_);
    }
    pool_->run(int(items_.size()), [&](int task, int worker) {
      cpu::attend(isa_, a_, items_[std::size_t(task)], k_tile_, scratch_[std::size_t(worker)]);
    });
    if (cfg_.family == Family::decode_v2) {
      const int H = a_.num_heads;
      pool_->run(int(reduce_seqs_.size()) * H, [&](int task, int worker) {
        cpu::combine_partials(isa_, a_, reduce_seqs_[std::size_t(task / H)], task % H,
                              reduce_tmp_.data() + std::size_t(worker) * a_.head_dim);
      });
    }
  }

  RunOutput download() override { return {out_, lse_}; }

  TimingResult time(const TimingOptions& opt) override {
    if (opt.mode == TimingMode::graph) {
      throw InputError("--timing graph needs a CUDA device; the CPU backend has no graphs");
    }
    std::string method = "steady_clock, " + std::to_string(pool_->size()) + " threads, " +
                         cpu::isa_name(isa_) + " kernels";
    if (opt.flush_cache) {
      // Twice the last-level cache, so no K/V line of the previous rep survives.
      const auto bytes = std::size_t(std::max<int64_t>(info_.l2_bytes, 1 << 20)) * 2;
      flush_.assign(bytes, 0);
      method += ", " + std::to_string(bytes >> 20) + " MiB buffer touched before each rep";
    } else {
      method += ", warm cache";
    }
    auto one_rep = [&] {
      if (opt.flush_cache) {
        flush_cache();
      }
      const auto t0 = std::chrono::steady_clock::now();
      run();
      const auto t1 = std::chrono::steady_clock::now();
      return std::chrono::duration<double>(t1 - t0).count();
    };
    return measure(
        one_rep, [&] { run(); }, opt, method);
  }

private:
  void add_item(const cpu::WorkItem& it) {
    const int ql = q_len_[std::size_t(it.b)];
    const int kl = k_len_[std::size_t(it.b)];
    int kb = 0;
    int ke = kl;
    if (it.part >= 0) {
      am::partition_bounds(it.part, a_.partition, kl, &kb, &ke);
    }
    int64_t keys = 0;
    for (int r = it.row_begin; r < it.row_end; ++r) {
      int lo, hi;
      am::visible_range(a_.mask, am::row_position(ql, kl, r), kl, &lo, &hi);
      keys += std::max(0, std::min(hi, ke) - std::max(lo, kb));
    }
    items_.push_back(it);
    cost_.push_back(keys * it.heads + (it.row_end - it.row_begin));
  }

  void flush_cache() {
    // Read-modify-write one byte per cache line: every line is loaded and dirtied, evicting
    // whatever the previous rep left.
    unsigned char* p = flush_.data();
    for (std::size_t i = 0; i < flush_.size(); i += 64) {
      p[i] = static_cast<unsigned char>(p[i] + 1);
    }
    sink_ = sink_ + p[flush_.size() / 2];
  }

  Problem pr_; // our copy of the problem: the "upload"
  KernelConfig cfg_;
  std::shared_ptr<ThreadPool> pool_;
  cpu::Isa isa_;
  DeviceInfo info_;
  int split_ = 1;
  int k_tile_ = 64;
  std::vector<int32_t> q_start_, q_len_, k_len_;
  HostTensor out_;
  std::vector<float> lse_;
  std::vector<float> part_m_, part_l_, part_o_;
  cpu::KernelArgs a_;
  std::vector<cpu::WorkItem> items_;
  std::vector<int64_t> cost_;
  std::vector<int> reduce_seqs_;
  std::vector<cpu::Scratch> scratch_;
  std::vector<float> reduce_tmp_;
  std::vector<unsigned char> flush_;
  volatile unsigned sink_ = 0;
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
    if (family_is_decode(cfg.family) != (pr.phase == Phase::decode)) {
      return std::string(fam) + " runs " + (family_is_decode(cfg.family) ? "decode" : "prefill") +
             " problems, not " + phase_name(pr.phase) + " problems";
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

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt) {
  return make_cpu_backend(opt, cpu::best_isa());
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
