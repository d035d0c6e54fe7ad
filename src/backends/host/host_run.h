// The host harness: what every kernel set that computes in host memory shares (the CPU
// backend, host-memory plugins, Python kernels through the bridge): a run's copy of the problem
// and its outputs, poisoning, download, and timing with a steady clock after flushing what the
// call touches from the caches.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/backends/backend.h"

namespace attn {

// Host memory a run reads or writes, by address and size.
struct HostRange {
  const void* data = nullptr;
  std::size_t bytes = 0;
};
// What a run over `pr` reads: the query, the K and V blocks its block tables reach within each
// sequence's keys (shared prefix blocks once; whatever the layout, a block is one contiguous
// slice of a [num_blocks, ...] cache), the block tables and lengths.
[[nodiscard]] std::vector<HostRange> problem_read_ranges(const Problem& pr);

// Times a call that computes on the host before it returns: a steady clock around each call.
// With opt.flush_cache the caches are emptied of the call's data before each rep: where the
// processor has CLFLUSHOPT, the lines of `touched` are flushed from every level (cheap: only
// what the call touches); elsewhere a buffer twice `llc_bytes` is read and written. `method`
// starts the method string. Refuses TimingMode::graph.
// The measurement records the share of its time the process's threads waited for a CPU
// (TimingResult::cpu_wait_share) and is made again while that is above kCpuWaitLimit, unless
// the call runs on more threads (`threads`, 0: not known) than this process may use CPUs: those
// waits are the call's own, and would come back every time.
[[nodiscard]] TimingResult
time_host_call(const std::function<void()>& call, const TimingOptions& opt, int64_t llc_bytes,
               std::string method, const std::vector<HostRange>& touched = {}, int threads = 0);
// The CPUs this process may run on (its affinity mask), at least 1.
[[nodiscard]] int usable_cpus();

// Memory that a host call reads and writes besides the problem: 64-byte aligned, like a device
// buffer.
class HostBuffer {
public:
  explicit HostBuffer(std::size_t bytes) : bytes_(bytes), lines_((bytes + 63) / 64 + 1) {}
  [[nodiscard]] void* get() {
    auto p = reinterpret_cast<std::uintptr_t>(lines_.data());
    return reinterpret_cast<void*>((p + 63) & ~std::uintptr_t(63));
  }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }

private:
  struct alignas(64) Line {
    unsigned char b[64];
  };
  std::size_t bytes_ = 0;
  std::vector<Line> lines_;
};

// A digest of `bytes` bytes at `data` (input_digests): not cryptographic, fast.
[[nodiscard]] uint64_t input_digest(const void* data, std::size_t bytes);
// The same over a vector's elements.
template <class V> [[nodiscard]] uint64_t input_digest(const V& v) {
  return input_digest(v.data(), v.size() * sizeof(v[0]));
}

// A problem held in host memory with one configuration: the run's own copy of the problem (the
// "upload"), out and lse, and scratch the subclass declares. Subclasses launch.
class HostRun : public PreparedRun {
public:
  ~HostRun() override; // leaves its copy's memory to the next run (host_run.cpp)
  HostRun(const HostRun&) = delete;
  HostRun& operator=(const HostRun&) = delete;
  void poison_outputs() override; // out, lse and the scratch, and the guards after out and lse
  // out and lse as the kernel left them, with whatever it wrote past either (RunOutput::overrun).
  [[nodiscard]] RunOutput download() override;
  // The problem's copy the kernel reads, negated where it lies.
  bool negate_inputs() override;
  // The same copy's query and fp8 scales (the CPU kernels read pr_'s scales in place).
  bool rescale_inputs(bool back) override;
  // The query, both caches (unread slots included), the block tables, the lengths and the fp8
  // scales of the copy the kernel reads.
  [[nodiscard]] std::vector<std::pair<std::string, uint64_t>> input_digests() const override;
  // A steady clock around run(), with the problem, out, lse and the scratch flushed before each
  // rep (time_host_call).
  [[nodiscard]] TimingResult time(const TimingOptions& opt) override;

protected:
  HostRun(const Problem& pr, bool writes_lse, int64_t llc_bytes);
  // The threads one call runs on (0: not known), so that the timing knows when the call's own
  // threads outnumber the CPUs.
  [[nodiscard]] virtual int call_threads() const { return 0; }
  // What the call writes besides out and lse (split-KV partials, a plugin's workspace), so that
  // the timing flushes it too.
  [[nodiscard]] virtual std::vector<HostRange> scratch() const { return {}; }
  // Fills the scratch with a pattern a kernel that read it unwritten would turn into NaN.
  virtual void poison_scratch() {}
  // "steady_clock, 2 threads, avx512 kernels": how the time was taken, before the flush's words.
  [[nodiscard]] virtual std::string method() const = 0;

  // Where the kernels write out ([rows, num_heads, head_dim]) and lse ([rows, num_heads]): each
  // followed by the guard download() checks (kOutputGuardBytes, backend.h; one of 16 or more
  // bytes past the end aborted the worker in glibc before, or did not).
  [[nodiscard]] void* out_data() { return out_mem_.get(); }
  [[nodiscard]] float* lse_data() { return static_cast<float*>(lse_mem_.get()); }

  Problem pr_;
  HostTensor out_;         // out poisoned: what poison_outputs() copies into the kernel's buffer
  std::vector<float> lse_; // the same for lse

private:
  HostBuffer out_mem_{0};
  HostBuffer lse_mem_{0};
  bool writes_lse_ = true;
  int64_t llc_bytes_ = 0;
};

} // namespace attn
