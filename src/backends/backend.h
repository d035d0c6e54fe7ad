// The kernel contract: a Backend is one kernel set on one device (the built-in CPU or CUDA
// kernels, a plugin, Python kernels through the bridge). It declares its families, layouts, lse
// and parameter spaces (kernel_decl.h), says why a configuration cannot run a problem, holds a
// problem in its memory, launches, times and downloads. The checked run (src/validation) is the
// one caller that runs it.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/backends/kernel_decl.h"
#include "src/backends/timing.h"
#include "src/model/kernel_config.h"
#include "src/model/problem.h"
#include "src/model/tensor.h"

namespace attn {

struct DeviceInfo {
  std::string backend; // "cpu" or "cuda"
  std::string id;      // "cpu", "cuda:0"
  std::string name;    // CPU model or GPU name
  std::string uuid;    // GPU UUID; empty on the CPU
  int sm_count = 0;    // GPU multiprocessors; CPU threads used on the CPU
  int cc_major = 0;
  int cc_minor = 0;
  int64_t memory_bytes = 0;
  int64_t l2_bytes = 0; // GPU L2, or the CPU's last-level cache
  std::string driver_version;
  std::string runtime_version;
  int threads = 0; // CPU backend worker threads
  [[nodiscard]] nlohmann::json to_json() const;
};

// An attention computation's outputs, downloaded to the host.
struct RunOutput {
  HostTensor out;          // [rows, num_heads, head_dim], the problem's dtype
  std::vector<float> lse;  // [rows, num_heads]
  bool lse_written = true; // false for plugin kernels that do not produce lse
  // Where the kernel wrote past the end of out or lse ("3 of the 64 bytes after out changed"),
  // as far as a guard after each shows; empty when it did not (or nothing guards them).
  std::string overrun;
  // lse when the kernel wrote it, for check_output; nullptr otherwise.
  [[nodiscard]] const std::vector<float>* checked_lse() const {
    return lse_written ? &lse : nullptr;
  }
};

// The guard after out and lse: every run's out and lse buffers, in host or device memory, are
// followed by kOutputGuardBytes of kOutputGuardByte, written with the poison and checked at
// download, so that a write past either end is a failure with its name (in host memory one of 8
// bytes passed unseen in the heap's slack; in device memory it lands in another allocation).
inline constexpr std::size_t kOutputGuardBytes = 64;
inline constexpr unsigned char kOutputGuardByte = 0xa5;
// RunOutput::overrun from the guards after out and lse as the run left them (kOutputGuardBytes
// each): "3 of the 64 bytes after out changed", empty when neither changed.
[[nodiscard]] std::string guard_overrun(const unsigned char* after_out,
                                        const unsigned char* after_lse);

// A problem resident on a backend with one kernel configuration, ready to launch repeatedly.
class PreparedRun {
public:
  virtual ~PreparedRun() = default;
  virtual void poison_outputs() = 0; // write the poison pattern into out and lse
  virtual void run() = 0;            // one launch; returns when the results are complete
  [[nodiscard]] virtual RunOutput download() = 0;
  [[nodiscard]] virtual TimingResult time(const TimingOptions& opt) = 0;
  // Negates the query and both caches in the buffers the kernel reads, in place (negate_inputs
  // in problem.h): the same addresses and shapes with other contents, as an engine's next decode
  // step rewrites its query and cache. The exact output is then the old one negated, lse the
  // same. False where this run cannot: a plugin whose prepare step may have laid out its own copy
  // of the cache, which the plugin ABI allows.
  virtual bool negate_inputs() { return false; }
  // With negate_inputs, for an fp8 problem with both scales: the query halved and the scales
  // doubled (back: undone) where the kernel reads them, in place (rescale_inputs in problem.h),
  // which doubles the exact output. False where this run cannot (the CUDA runs, whose scales
  // live in device buffers, do not yet) or the problem has no such scales.
  virtual bool rescale_inputs(bool /*back*/) { return false; }
  // A digest of each input the kernel reads where this run holds it in host memory, named ("the
  // query", "the key cache", ...): a kernel may only read them, and checked_run compares them
  // before and after a call. Empty where the run cannot (the CUDA runs).
  [[nodiscard]] virtual std::vector<std::pair<std::string, uint64_t>> input_digests() const {
    return {};
  }
};

// One (problem shape, configuration) pair of a sweep's plan: what prepare_plan gets ready.
struct PlanItem {
  AttnParams params;
  KernelConfig config;
};

// Why a configuration of family f cannot run a problem of phase ph (the decode families run
// decode problems, prefill runs prefill ones), or nullopt when the phases agree: the first check
// of a backend's can_run.
[[nodiscard]] std::optional<std::string> phase_mismatch(Family f, Phase ph);

class Backend {
public:
  virtual ~Backend() = default;
  [[nodiscard]] virtual const DeviceInfo& info() const = 0;
  // What the set implements: families, their KV layouts, lse and parameter spaces.
  [[nodiscard]] virtual const KernelSetDecl& declaration() const = 0;
  // The configurations the tuner explores for a family on problems with parameters `p` (before
  // can_run filtering): the declared combinations the set offers for such problems.
  [[nodiscard]] virtual std::vector<KernelConfig> config_space(Family f, const AttnParams& p) const;
  // Why `cfg` cannot run `pr` on this set, or nullopt when it can: the contract's checks (the
  // family's phase, a family the set declares, a head_dim the declared layout can hold), then
  // the set's own refuse().
  [[nodiscard]] virtual std::optional<std::string> can_run(const KernelConfig& cfg,
                                                           const Problem& pr) const;
  // can_run as far as the set can tell without building its kernels: the contract's checks, then
  // refuse_unbuilt(). For questions over many shapes that run nothing (verify's aim at the block
  // and head sizes a set accepts): the CUDA backend's can_run compiles the variant to read its
  // registers and spills, one at a time, which over every size took minutes on an H200.
  [[nodiscard]] std::optional<std::string> can_run_unbuilt(const KernelConfig& cfg,
                                                           const Problem& pr) const;
  // Gets every pair of a plan ready before the first is timed, so that no compile falls inside a
  // measurement (the CUDA backend compiles their kernels on all cores), calling
  // progress(done, total) as it goes (progress(0, total) first). Nothing to do by default.
  virtual void prepare_plan(const std::vector<PlanItem>& plan,
                            const std::function<void(int done, int total)>& progress) {
    (void)plan;
    (void)progress;
  }
  // The kernels this set runs, for provenance and for resuming only onto the same ones:
  // {"source": "built-in", "name": "attn-tune"} here; plugins say which library they are.
  [[nodiscard]] virtual nlohmann::json kernels() const {
    return {{"source", "built-in"}, {"name", "attn-tune"}};
  }
  // Validates `pr`, throws InputError when can_run refuses, rearranges it into the layout the
  // family declares (outside any timing), then make_run allocates and uploads.
  [[nodiscard]] virtual std::unique_ptr<PreparedRun> prepare(const Problem& pr,
                                                             const KernelConfig& cfg);

protected:
  // Whether the set offers a declared configuration for problems with parameters `p` (the CUDA
  // kernels offer split=1 only for GQA groups they hold in registers, ...). All by default.
  [[nodiscard]] virtual bool offers(const KernelConfig& cfg, const AttnParams& p) const {
    (void)cfg;
    (void)p;
    return true;
  }
  // What only this set knows about why `cfg` cannot run `pr`; the contract's checks passed.
  [[nodiscard]] virtual std::optional<std::string> refuse(const KernelConfig& cfg,
                                                          const Problem& pr) const = 0;
  // refuse() without building anything (the CUDA backend's host rules); refuse() by default.
  [[nodiscard]] virtual std::optional<std::string> refuse_unbuilt(const KernelConfig& cfg,
                                                                  const Problem& pr) const {
    return refuse(cfg, pr);
  }
  // The run of `cfg` on `pr`, which is valid, accepted by can_run and in the family's layout.
  [[nodiscard]] virtual std::unique_ptr<PreparedRun>
  make_run(const Problem& pr, const KernelConfig& cfg, const FamilyDecl& fam) = 0;
  // "the CPU", "plugin NAME", "cuda:0": who refuses, in prepare's error.
  [[nodiscard]] virtual std::string refuser() const { return info().id; }

private:
  // The contract's checks of can_run (phase, family, the cache dtype it reads, the layout's
  // head_dim), before the set's own refusal.
  [[nodiscard]] std::optional<std::string> contract_refusal(const KernelConfig& cfg,
                                                            const Problem& pr) const;
};

struct BackendOptions {
  int threads = 0;     // CPU backend: worker threads (0: all hardware threads)
  std::string kernels; // a kernel plugin library (--kernels PATH.so); empty: built-in kernels
};

// Runs `cfg` on `pr` once with poisoned outputs and returns them (the validate step; the
// checked run and diagnose call it).
[[nodiscard]] RunOutput run_once(Backend& be, const Problem& pr, const KernelConfig& cfg);

// The kernels of `be` as results headers and table provenance record them: kernels() plus the
// engine rule its declaration names they replace ("engine_rule": "vllm-cuda", "vllm-cpu",
// "seed", or "" for none), which the table's regret then names as the kernel set's own rule.
[[nodiscard]] nlohmann::json kernels_provenance(const Backend& be);

} // namespace attn
