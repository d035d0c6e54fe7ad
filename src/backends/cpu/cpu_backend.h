// The CPU backend: decode_v1, decode_v2 and prefill on host cores through a thread pool, with the
// kernels of cpu_kernels.h; the first implementation of the interface in src/backends/backend.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/backends/backend.h"
#include "src/backends/cpu/cpu_kernels.h"

namespace attn {

// Kernel configuration parameters of the CPU families (one line each):
//   decode_v1  split      0: one work item per (sequence, query head); 1: per (sequence, KV
//                         head), one pass over K/V serving the whole query group
//   decode_v2  partition  keys per split-KV partition, a multiple of block_size
//              split      as above, per partition
//   prefill    q_tile     query rows per work item
//              k_tile     keys per tile of the online-softmax loop
//              split      as above
inline constexpr int kCpuMaxQTile = 256;
inline constexpr int kCpuMaxKTile = 1024;
inline constexpr int kCpuMaxPartition = 1 << 20;

// Host memory a run reads or writes, by address and size.
struct HostRange {
  const void* data = nullptr;
  std::size_t bytes = 0;
};
// What a run over `pr` reads: the query, the K and V blocks its block tables reach within each
// sequence's keys (shared prefix blocks once; whatever the layout, a block is one contiguous
// slice of a [num_blocks, ...] cache), the block tables and lengths.
[[nodiscard]] std::vector<HostRange> problem_read_ranges(const Problem& pr);

// Times a call that computes on the host before it returns (the CPU backend's runs, host-memory
// plugins): a steady clock around each call. With opt.flush_cache the caches are emptied of the
// call's data before each rep: where the processor has CLFLUSHOPT, the lines of `touched` are
// flushed from every level (cheap: only what the call touches); elsewhere a buffer twice
// `llc_bytes` is read and written. `method` starts the method string. Refuses TimingMode::graph.
[[nodiscard]] TimingResult time_host_call(const std::function<void()>& call,
                                          const TimingOptions& opt, int64_t llc_bytes,
                                          std::string method,
                                          const std::vector<HostRange>& touched = {});

// Uses the best kernel build the processor runs (cpu::best_isa()).
[[nodiscard]] std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt);
// Uses the given kernel build; throws DeviceUnavailable when the processor lacks it.
[[nodiscard]] std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt, cpu::Isa isa);

} // namespace attn
