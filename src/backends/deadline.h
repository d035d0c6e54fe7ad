// How long one unit of supervised work (a configuration's check and timing, or one checked case)
// may take before the supervisor calls it hung: a generous multiple of what it should take.
#pragma once
#include "src/backends/backend.h"

namespace attn {

// The seconds one launch of `pr` should take at worst on `dev`: counted flops and bytes over
// rates far below any machine attn-tune runs on (a slow 2-core CPU, an old GPU).
[[nodiscard]] double pessimistic_launch_s(const Problem& pr, const DeviceInfo& dev);

// The deadline of a unit that prepares `pr`, runs it once to check it (and, with
// `rewritten_call`, once more after negating its inputs in place and back, RunRequest) and, when
// `timing` is given, times it under those options. No kernel of ours should take seconds, so a
// unit that runs this long is stuck, not slow.
[[nodiscard]] double unit_deadline_s(const Problem& pr, const DeviceInfo& dev,
                                     const TimingOptions* timing, bool rewritten_call = false);

} // namespace attn
