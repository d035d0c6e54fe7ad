// The CPU backend: decode_v1, decode_v2 and prefill on host cores through a thread pool, with the
// kernels of cpu_kernels.h, declared and timed like any host kernel set (host/host_run.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/backends/backend.h"
#include "src/backends/cpu/cpu_kernels.h"
#include "src/backends/host/host_run.h"

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

// What the CPU kernels declare (HND caches, lse written, the values the tuner tries).
[[nodiscard]] const KernelSetDecl& cpu_kernels_declaration();

// Uses the best kernel build the processor runs (cpu::best_isa()).
[[nodiscard]] std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt);
// Uses the given kernel build; throws DeviceUnavailable when the processor lacks it.
[[nodiscard]] std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt, cpu::Isa isa);

} // namespace attn
