// The CPU backend: decode_v1, decode_v2 and prefill on host cores through a thread pool, with the
// kernels of cpu_kernels.h; the first implementation of the interface in src/backends/backend.h.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

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

// Times a call that computes on the host before it returns (the CPU backend's runs, host-memory
// plugins): a steady clock around each call, a buffer twice `llc_bytes` touched before each
// when opt.flush_cache; `method` starts the method string. Refuses TimingMode::graph.
[[nodiscard]] TimingResult time_host_call(const std::function<void()>& call,
                                          const TimingOptions& opt, int64_t llc_bytes,
                                          std::string method);

// Uses the best kernel build the processor runs (cpu::best_isa()).
[[nodiscard]] std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt);
// Uses the given kernel build; throws DeviceUnavailable when the processor lacks it.
[[nodiscard]] std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt, cpu::Isa isa);

} // namespace attn
