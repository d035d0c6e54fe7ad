// How long one unit of supervised work (a configuration's check and timing, or one checked case)
// may take before the supervisor calls it hung: a generous multiple of what it should take.
#pragma once
#include "src/backends/backend.h"

namespace attn {

// The seconds one launch of `pr` should take at worst on `dev`: counted flops and bytes over
// rates far below any machine attn-tune runs on (a slow 2-core CPU, an old GPU).
[[nodiscard]] double pessimistic_launch_s(const Problem& pr, const DeviceInfo& dev);

// $var as a number of seconds, `fallback` where it is unset or empty; InputError naming it when it
// is not a number above 0.
[[nodiscard]] double seconds_from_env(const char* var, double fallback);

// The seconds every unit is allowed on top of what its launches should take: startup the launch
// count does not cover (allocation and upload, a module load, the check). 10 on the CPU, 30 on a
// GPU, or $ATTN_TUNE_UNIT_GRACE seconds: lower for a CI run that plants hangs on purpose, where
// each hang costs its whole deadline; higher for kernels whose first call is slow (a Python module
// that compiles on first use). InputError when the variable is set and not a number of seconds
// above 0.
[[nodiscard]] double unit_grace_s(const DeviceInfo& dev);

// The deadline of a unit that prepares `pr`, runs it once to check it (and, with
// `rewritten_call`, once more after negating its inputs in place and back, RunRequest) and, when
// `timing` is given, times it under those options. No kernel of ours should take seconds, so a
// unit that runs this long is stuck, not slow.
[[nodiscard]] double unit_deadline_s(const Problem& pr, const DeviceInfo& dev,
                                     const TimingOptions* timing, bool rewritten_call = false);

} // namespace attn
