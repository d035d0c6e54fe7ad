// What a wrong output looks like: when a kernel fails a check, verify tries the usual mistakes
// and says which one explains the output, so that a failure line reads "the sliding window is
// ignored" rather than only "norm_rel_err=0.3".
//
// Two kinds of evidence:
// - the output equals (within the dtype's tolerance) the reference of the same call with one
//   option dropped or changed: causal off, the window or the softcap ignored, the default scale,
//   a window one key too wide or too narrow;
// - the wrong rows equal what a kernel with one of engines' usual bugs computes (engine_bugs.h:
//   split-KV boundaries and reductions, the GQA head mapping, the last block's length, stale
//   keys, an lse in base 2);
// - the kernel, run again on a changed call, reacts as a correct one would not: its output stays
//   the same when every cached key and value changes (it does not read the cache), or changes
//   when the same keys are stored in other physical blocks (it does not follow the block table).
#pragma once
#include <string>
#include <vector>

#include "reference/reference.h"
#include "src/backends/backend.h"
#include "src/model/kernel_config.h"
#include "src/model/problem.h"
#include "src/validation/check.h"

namespace attn {

// Short phrases ("the sliding window is ignored"), most specific first; empty when nothing
// explains the output. `wrong` is wrong_pairs() of `got`. Runs the kernel up to twice more;
// throws what run_once throws.
[[nodiscard]] std::vector<std::string>
diagnose_failure(Backend& be, const KernelConfig& cfg, const Problem& pr, const RunOutput& got,
                 const ReferenceResult& ref, const Tolerance& tol,
                 const std::vector<WrongPair>& wrong, int ref_threads);

} // namespace attn
