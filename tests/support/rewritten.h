// The rewritten call (verify's second call after a pass, PreparedRun::negate_inputs) on one
// prepared run: the CPU backend's test and the CUDA kernels' tests share it.
#pragma once
#include <cmath>
#include <cstddef>

#include <gtest/gtest.h>

#include "src/backends/backend.h"
#include "src/model/problem.h"

namespace attn::test {

// Prepares `cfg` over `pr` on `be` and calls it three times: as given, after negate_inputs (the
// query and caches negated in the buffers the kernel reads), and after negating them back. The
// second output must be the first negated, bit for bit (each score is (-q).(-k), each product
// with V's negation rounds to the negation), with the same lse; the third the first again; and no
// call may touch the guards after out and lse. `rel_tol` > 0 allows the second output that much
// relative difference from the first negated, for arithmetic whose rounding the test cannot vouch
// is sign-symmetric (tensor-core accumulation); a kept output is the first, far from it.
inline void expect_negation_round_trip(Backend& be, const Problem& pr, const KernelConfig& cfg,
                                       double rel_tol = 0.0) {
  auto run = be.prepare(pr, cfg);
  const auto call = [&run] {
    run->poison_outputs();
    run->run();
    RunOutput o = run->download();
    EXPECT_EQ(o.overrun, "");
    return o;
  };
  const RunOutput first = call();
  ASSERT_TRUE(run->negate_inputs());
  const RunOutput second = call();
  ASSERT_EQ(first.out.data.size(), second.out.data.size());
  for (std::size_t i = 0; i < std::size_t(first.out.numel()); ++i) {
    if (rel_tol > 0) {
      ASSERT_NEAR(second.out.get(i), -first.out.get(i), rel_tol * std::fabs(first.out.get(i)))
          << "element " << i;
    } else {
      ASSERT_EQ(second.out.get(i), -first.out.get(i)) << "element " << i;
    }
  }
  EXPECT_EQ(second.lse, first.lse);
  ASSERT_TRUE(run->negate_inputs());
  EXPECT_EQ(call().out.data, first.out.data);
}

} // namespace attn::test
