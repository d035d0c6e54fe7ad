// What verify aims at in a kernel set (verify_cases.h KernelTargets): the values it declares
// (decode_v2's "partition", or none where the kernel chooses its splits; prefill's "q_tile" and
// "k_tile") and the block and head sizes some configuration of the phase accepts, found by
// asking can_run_unbuilt on small problems of each candidate size (can_run for plugins and Python
// modules; the CUDA backend's host rules without a compile). The plugin ABI declares no block or
// head sizes: can_run's answers are the declaration.
#pragma once
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "src/backends/backend.h"
#include "src/validation/verify_cases.h"

namespace attn {

// The block sizes asked about: 8 to 128 in powers of two, and every multiple of 8 up to 256 that
// divides a declared partition (a kernel with partition 384 may want block size 48 or 96).
[[nodiscard]] std::vector<int> candidate_block_sizes(const std::vector<int>& partitions);
// The head sizes asked about.
[[nodiscard]] std::vector<int> candidate_head_dims();

// The block sizes verify's one-size groups run at: from (block size, the configurations that
// accept it) in order of preference, the size accepted by the most configurations not yet
// covered, until every configuration that accepts any is covered (a tie goes to the earlier).
[[nodiscard]] std::vector<int>
home_block_sizes(const std::vector<std::pair<int, std::set<std::string>>>& by_size);

// How long a kernel set may take to say which sizes it accepts (can_run on small problems), a
// kernel phase of its own in verify and plugin check.
inline constexpr double kKernelPhaseSeconds = 120.0;

// The targets of `be` for one phase and dtype (the declared families of the phase only).
[[nodiscard]] KernelTargets kernel_targets(const Backend& be, Phase phase, DType dtype);

} // namespace attn
