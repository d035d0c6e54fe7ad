// The supervisor's deadline for one unit of work (src/backends/deadline.h): what it allows grows
// with what the unit does.
#include <gtest/gtest.h>

#include <cstdlib>

#include "src/backends/deadline.h"
#include "src/model/errors.h"
#include "src/model/problem_gen.h"
#include "tests/support/problems.h"

namespace attn {
namespace {

// The call made again after its inputs were negated in place (verify's rewritten call) gets a
// second launch and the negation's traffic on top: on a GPU four pageable copies of the query and
// both caches, at a floor of 1 GB/s.
TEST(Deadline, ARewrittenCallAddsItsLaunchAndItsCopies) {
  const Problem pr = make_decode_problem(test::params(8, 2, 128), {4096, 4096}, {.seed = 1});
  const auto inputs = double(pr.input_bytes());
  for (const char* backend : {"cpu", "cuda"}) {
    SCOPED_TRACE(backend);
    DeviceInfo dev;
    dev.backend = backend;
    const double plain = unit_deadline_s(pr, dev, nullptr);
    const double rewritten = unit_deadline_s(pr, dev, nullptr, true);
    const double one = pessimistic_launch_s(pr, dev);
    EXPECT_GE(rewritten - plain, 2 * one);
    if (dev.backend == "cuda") {
      EXPECT_NEAR(rewritten - plain, 2 * one + 4 * inputs / 1e9, 1e-9);
    }
  }
}

// $ATTN_TUNE_UNIT_GRACE replaces the startup allowance alone: what the launches and the timing
// ask for still comes on top. A value that is not a number of seconds above 0 is an input error.
TEST(Deadline, TheGraceVariableReplacesTheStartupAllowanceOnly) {
  const Problem pr = make_decode_problem(test::params(8, 2, 128), {4096, 4096}, {.seed = 1});
  TimingOptions timing;
  for (const char* backend : {"cpu", "cuda"}) {
    SCOPED_TRACE(backend);
    DeviceInfo dev;
    dev.backend = backend;
    ::unsetenv("ATTN_TUNE_UNIT_GRACE");
    const double grace = unit_grace_s(dev);
    EXPECT_EQ(grace, dev.backend == "cuda" ? 30.0 : 10.0);
    const double plain = unit_deadline_s(pr, dev, nullptr);
    const double timed = unit_deadline_s(pr, dev, &timing, true);
    ::setenv("ATTN_TUNE_UNIT_GRACE", "0.5", 1);
    EXPECT_EQ(unit_grace_s(dev), 0.5);
    EXPECT_NEAR(unit_deadline_s(pr, dev, nullptr), plain - grace + 0.5, 1e-9);
    EXPECT_NEAR(unit_deadline_s(pr, dev, &timing, true), timed - grace + 0.5, 1e-9);
    for (const char* bad : {"0", "-1", "abc", "2s", "inf", "nan"}) {
      SCOPED_TRACE(bad);
      ::setenv("ATTN_TUNE_UNIT_GRACE", bad, 1);
      EXPECT_THROW((void)unit_grace_s(dev), InputError);
    }
    ::unsetenv("ATTN_TUNE_UNIT_GRACE");
  }
}

} // namespace
} // namespace attn
