// From a profile to the plan a sweep runs: the grid expanded into workloads, and the kernel
// configurations to try on each.
#pragma once
#include <cstdint>
#include <vector>

#include "src/backends/backend.h"
#include "src/model/workload.h"
#include "src/tuning/profile.h"

namespace attn {

// The most workloads one phase's grid may cross to (mixed batches counted): a million, days of
// sweeping on a GPU; a larger grid is a mistake in the profile, refused in one line.
inline constexpr int64_t kMaxGridWorkloads = 1'000'000;

// The grid's workloads in a stable order (phase, then the axes in schema order; a decode grid's
// mixed batches after its uniform ones at each combination of the other axes), followed by the
// held-out workloads (flagged). Prefill pairs with q_len > k_len are left out; a workload that
// repeats an earlier one is left out.
[[nodiscard]] std::vector<Workload> expand_workloads(const Profile& p);

// The configurations to try on a workload: the profile's list or the backend's config_space.
// The decode workloads a traffic trace gives (sweep --traffic): the sampled batches on every
// combination of the profile's decode axes other than batch and the lengths (the trace header's
// shape, where it names one, in place of those axes), each with its count as weight.
[[nodiscard]] std::vector<Workload> traffic_workloads(const Profile& p, const Trace& t,
                                                      const std::vector<TrafficSample>& sample);

[[nodiscard]] std::vector<KernelConfig> configs_for(const Profile& p, const Backend& be,
                                                    const Workload& w);

} // namespace attn
