// The backend interface that sweep, verify and replay drive: a backend lists its kernel
// families and their configuration space, says why a configuration cannot run a problem,
// holds a problem in its memory, launches, times and downloads. CPU and CUDA implement it.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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
  // lse when the kernel wrote it, for check_output; nullptr otherwise.
  [[nodiscard]] const std::vector<float>* checked_lse() const {
    return lse_written ? &lse : nullptr;
  }
};

// A problem resident on a backend with one kernel configuration, ready to launch repeatedly.
class PreparedRun {
public:
  virtual ~PreparedRun() = default;
  virtual void poison_outputs() = 0; // write the poison pattern into out and lse
  virtual void run() = 0;            // one launch; returns when the results are complete
  [[nodiscard]] virtual RunOutput download() = 0;
  [[nodiscard]] virtual TimingResult time(const TimingOptions& opt) = 0;
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
  // The configurations the tuner explores for a family (before can_run filtering).
  [[nodiscard]] virtual std::vector<KernelConfig> config_space(Family f,
                                                               const AttnParams& p) const = 0;
  // Why `cfg` cannot run `pr` on this backend, or nullopt when it can.
  [[nodiscard]] virtual std::optional<std::string> can_run(const KernelConfig& cfg,
                                                           const Problem& pr) const = 0;
  // Gets every pair of a plan ready before the first is timed, so that no compile falls inside a
  // measurement (the CUDA backend compiles their kernels on all cores), calling
  // progress(done, total) as it goes (progress(0, total) first). Nothing to do by default.
  virtual void prepare_plan(const std::vector<PlanItem>& plan,
                            const std::function<void(int done, int total)>& progress) {
    (void)plan;
    (void)progress;
  }
  // The kernels this backend runs, for provenance and for resuming only onto the same ones:
  // {"source": "built-in", "name": "attn-tune"} here; plugins say which library they are.
  [[nodiscard]] virtual nlohmann::json kernels() const {
    return {{"source", "built-in"}, {"name", "attn-tune"}};
  }
  // Allocates and uploads; throws InputError when can_run would refuse.
  [[nodiscard]] virtual std::unique_ptr<PreparedRun> prepare(const Problem& pr,
                                                             const KernelConfig& cfg) = 0;
};

struct BackendOptions {
  int threads = 0;     // CPU backend: worker threads (0: all hardware threads)
  std::string kernels; // a kernel plugin library (--kernels PATH.so); empty: built-in kernels
};

// Runs `cfg` on `pr` once with poisoned outputs and returns them (the validate step).
[[nodiscard]] RunOutput run_once(Backend& be, const Problem& pr, const KernelConfig& cfg);

} // namespace attn
