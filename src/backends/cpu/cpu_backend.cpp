// CPU backend: turns a problem and a configuration into a list of work items (sorted longest
// first so the pool's dynamic hand-out balances ragged batches) and runs them; the host harness
// (host/host_run.h) times them.
#include "src/backends/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <thread>

#include "src/backends/cpu/cpu_plan.h"
#include "src/backends/cpu/thread_pool.h"
#include "src/backends/host/host_info.h"
#include "src/model/errors.h"

namespace attn {

namespace {

// The test hook behind ATTN_TUNE_TEST_FAULTS (docs/architecture.md): configurations that crash
// the way a broken kernel would, so that the tests can prove the sweep's and verify's fault
// isolation without a GPU. "segv:KEY;hang:KEY;abort:KEY;kill:KEY", KEY a configuration key;
// kill is what the OOM killer or `kill -9` does to the worker from outside.
enum class InjectedFault { none, segv, hang, abort, kill };

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
                            : kind == "kill"  ? InjectedFault::kill
                                              : InjectedFault::none;
    if (f == InjectedFault::none || key.empty()) {
      throw InputError("ATTN_TUNE_TEST_FAULTS: '" + item +
                       "' is not segv:KEY, hang:KEY, abort:KEY or kill:KEY (KEY a configuration "
                       "key)");
    }
    out[key] = f;
  }
  return out;
}

[[noreturn]] void crash_as(InjectedFault f) {
  if (f == InjectedFault::abort) {
    std::abort();
  }
  if (f == InjectedFault::kill) {
    std::raise(SIGKILL);
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

class CpuPreparedRun final : public HostRun {
public:
  CpuPreparedRun(const Problem& pr, const KernelConfig& cfg, std::shared_ptr<ThreadPool> pool,
                 cpu::Isa isa, cpu::Fp8Reads fp8_reads, const DeviceInfo& info, InjectedFault fault)
      : HostRun(pr, /*writes_lse=*/true, info.l2_bytes), pool_(std::move(pool)), isa_(isa),
        fault_(fault) {
    const AttnParams& p = pr_.params;
    const int H = p.num_heads;
    std::vector<int32_t> q_start, q_len, k_len;
    for (int b = 0; b < pr_.batch; ++b) {
      q_start.push_back(pr_.q_start(b));
      q_len.push_back(pr_.q_len(b));
      k_len.push_back(pr_.k_len(b));
    }

    cpu::KernelArgs a;
    a.dtype = p.dtype;
    if (p.fp8_cache()) {
      a.kv_dtype = p.cache_dtype();
      a.k_scale = pr_.k_scale.data();
      a.k_scales = int(pr_.k_scale.size());
      a.v_scale = pr_.v_scale.data();
      a.v_scales = int(pr_.v_scale.size());
      // The portable build has no fp16 conversion instruction: it always moves the bits. The
      // others read E5M2 through fp16 bits, exact for all its bytes (cpu_kernels_body.inc).
      a.fp8_via_fp32 = isa == cpu::Isa::base ||
                       (fp8_reads == cpu::Fp8Reads::via_fp32 && a.kv_dtype == DType::fp8_e4m3);
      fp8_reads_ = a.fp8_via_fp32 ? cpu::Fp8Reads::via_fp32 : cpu::Fp8Reads::via_fp16;
    }
    a.num_heads = H;
    a.num_kv_heads = p.num_kv_heads;
    a.head_dim = p.head_dim;
    a.block_size = p.block_size;
    a.group = p.group_size();
    a.scale = float(p.effective_scale());
    a.softcap = float(p.softcap);
    a.mask = p.mask();
    a.query = pr_.query.raw();
    a.key_cache = pr_.key_cache.raw();
    a.value_cache = pr_.value_cache.raw();
    a.block_tables = pr_.block_tables.data();
    a.max_blocks_per_seq = pr_.max_blocks_per_seq;
    a.out = out_data();
    a.lse = lse_data();

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

  void run() override {
    if (fault_ != InjectedFault::none) {
      crash_as(fault_);
    }
    plan_->run(*pool_);
  }

private:
  // Partials too: a reduce that read a partition nobody wrote would produce NaN, not a
  // plausible number.
  void poison_scratch() override { poison(partials_); }
  std::vector<HostRange> scratch() const override {
    return {{partials_.data(), partials_.size() * sizeof(float)}};
  }
  std::string method() const override {
    std::string m = "steady_clock, " + std::to_string(pool_->size()) + " threads, " +
                    cpu::isa_name(isa_) + " kernels";
    if (pr_.params.fp8_cache()) {
      m += std::string(", fp8 read ") + cpu::fp8_reads_name(fp8_reads_);
    }
    return m;
  }
  int call_threads() const override { return pool_->size(); }

  std::shared_ptr<ThreadPool> pool_;
  cpu::Isa isa_;
  cpu::Fp8Reads fp8_reads_ = cpu::Fp8Reads::via_fp16; // as read, for an fp8 cache
  std::vector<float> partials_;
  std::optional<cpu::CallPlan> plan_;
  InjectedFault fault_ = InjectedFault::none;
};

class CpuBackend final : public Backend {
public:
  CpuBackend(const BackendOptions& opt, cpu::Isa isa)
      : info_(cpu_device_info(opt.threads)), isa_(isa), fp8_reads_(cpu::selected_fp8_reads()),
        pool_(std::make_shared<ThreadPool>(info_.threads)), faults_(injected_faults()) {}

  const DeviceInfo& info() const override { return info_; }
  const KernelSetDecl& declaration() const override { return cpu_kernels_declaration(); }
  // The build that runs (ATTN_TUNE_CPU_ISA picks another): a baseline build times 3 to 8 times
  // slower than x86-64-v4 on one machine, so a sweep resumed or merged across levels would mix
  // two kernel sets in one table.
  nlohmann::json kernels() const override {
    return {{"source", "built-in"}, {"name", "attn-tune"}, {"isa", cpu::isa_name(isa_)}};
  }

protected:
  std::optional<std::string> refuse(const KernelConfig& cfg, const Problem& pr) const override {
    const char* fam = family_name(cfg.family);
    const FamilyDecl& decl = *declaration().family(cfg.family);
    for (const auto& [k, v] : cfg.params) {
      const std::string& name = k; // a structured binding is not capturable before clang 16
      if (std::none_of(decl.params.begin(), decl.params.end(),
                       [&name](const ParamSpace& p) { return p.name == name; })) {
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

  std::unique_ptr<PreparedRun> make_run(const Problem& pr, const KernelConfig& cfg,
                                        const FamilyDecl&) override {
    const auto f = faults_.find(cfg.key());
    return std::make_unique<CpuPreparedRun>(pr, cfg, pool_, isa_, fp8_reads_, info_,
                                            f == faults_.end() ? InjectedFault::none : f->second);
  }

  std::string refuser() const override { return "the CPU"; }

private:
  DeviceInfo info_;
  cpu::Isa isa_;
  cpu::Fp8Reads fp8_reads_;
  std::shared_ptr<ThreadPool> pool_;
  std::map<std::string, InjectedFault> faults_;
};

} // namespace

const KernelSetDecl& cpu_kernels_declaration() {
  static const std::vector<DType> kFp8 = {DType::fp8_e4m3, DType::fp8_e5m2};
  // split outermost, as the tuner has always walked them: per query head first, then grouped.
  static const KernelSetDecl decl{
      "attn-tune",
      MemoryKind::host,
      // Every family reads both fp8 caches, converting as it loads.
      {{Family::decode_v1, KvLayout::HND, true, {{"split", {0, 1}}}, kFp8},
       {Family::decode_v2,
        KvLayout::HND,
        true,
        {{"split", {0, 1}}, {"partition", {256, 512, 1024}}},
        kFp8},
       {Family::prefill,
        KvLayout::HND,
        true,
        {{"split", {0, 1}}, {"q_tile", {16, 32, 64}}, {"k_tile", {32, 64, 128}}},
        kFp8}},
      // The rule a CPU engine's decode attention decides v1/v2 by: vLLM CPU's (split-KV unless
      // VLLM_CPU_ATTN_SPLIT_KV=0). vLLM CUDA's rule counts threads against a GPU's SMs and the
      // seed engine's hard-codes a BI-V100's 16; neither is what a CPU engine would replace.
      "vllm-cpu"};
  return decl;
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
