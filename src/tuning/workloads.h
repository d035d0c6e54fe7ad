// From a profile to the plan a sweep runs: the grid expanded into workloads, and the kernel
// configurations to try on each.
#pragma once
#include <vector>

#include "src/backends/backend.h"
#include "src/model/workload.h"
#include "src/tuning/profile.h"

namespace attn {

// The grid's workloads in a stable order (phase, then the axes in schema order), followed by
// the held-out workloads (flagged). Prefill pairs with q_len > k_len are left out.
[[nodiscard]] std::vector<Workload> expand_workloads(const Profile& p);

// The configurations to try on a workload: the profile's list or the backend's config_space.
[[nodiscard]] std::vector<KernelConfig> configs_for(const Profile& p, const Backend& be,
                                                    const Workload& w);

} // namespace attn
