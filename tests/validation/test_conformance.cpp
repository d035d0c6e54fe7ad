// Conformance: every kernel set of tests/support/kernel_sets.h (the built-in kernels, the example
// plugins, attn-tune's PyTorch kernels through the Python bridge) passes the very same verify
// cases, each a checked run against the reference. One test per kernel set, so that CTest prints
// one line per set; a set this machine or build lacks (no GPU, not built) skips with the reason.
//
// The checks run in this process, not in verify's supervised workers: CTest already runs each
// kernel set in a process of its own, so a crash fails that set's line alone, while the
// sanitized build (scripts/test-sanitizers.sh) sees every kernel call and every leak, and a
// sticky CUDA error fails the test with its message. test_verify_command covers the workers.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <iomanip>
#include <map>
#include <sstream>
#include <string>

#include "src/validation/verify.h"
#include "tests/support/kernel_sets.h"

namespace attn {
namespace {

// The cases every kernel set runs, chosen once for all of them: SPEC.md's edges at quick
// intensity, every family and dtype, one seed. Measured on 2 busy cores, one set at a time:
// about 7 s for each CPU set (20 s instrumented) and 8.5 s for the Python one (1,776 and 252
// checks: the PyTorch kernels declare fewer configurations, each call far slower).
constexpr const char* kIntensity = "quick";

VerifyOptions conformance_options() {
  VerifyOptions o;
  o.families = {Family::decode_v1, Family::decode_v2, Family::prefill};
  o.dtypes = {DType::f32, DType::f16, DType::bf16};
  o.intensity = parse_intensity(kIntensity);
  o.seed = 1;
  // The query-dtype caches only: the sets here share the contract every plugin speaks, and the
  // built-in kernels' fp8 groups run in cli.verify_cpu_quick and the Verify tests.
  o.fp8.clear();
  return o;
}

// Host kernel threads. One: torch's thread pool made the Python set six times slower at two
// threads on 2 busy cores, and the native sets take no longer at one.
constexpr int kThreads = 1;

// The command that reruns what this test ran, with every failing line.
std::string reproduce(const test::KernelSet& set, const VerifyOptions& o) {
  std::ostringstream s;
  s << "attn-tune verify " << test::cli_flags(set) << " --seed " << o.seed << " --intensity "
    << kIntensity << " --threads " << kThreads;
  const char* sep = " --families ";
  for (Family f : o.families) {
    s << sep << family_name(f);
    sep = ",";
  }
  sep = " --dtypes ";
  for (DType t : o.dtypes) {
    s << sep << dtype_name(t);
    sep = ",";
  }
  s << " --kv-dtypes auto";
  return s.str();
}

// The first failing lines (each names the configuration, the case and its seeds) and what the
// failures look like.
std::string failures_of(const VerifyReport& rep, const std::string& rerun) {
  constexpr int kShown = 10;
  std::ostringstream s;
  int shown = 0;
  for (const VerifyTestcase& tc : rep.testcases) {
    for (const std::string& line : tc.failures) {
      if (shown++ < kShown) {
        s << "\n  " << line;
      }
    }
  }
  if (shown > kShown) {
    s << "\n  ... and " << shown - kShown << " more";
  }
  std::map<std::string, int> causes;
  for (const VerifyTestcase& tc : rep.testcases) {
    for (const auto& [cause, n] : tc.causes) {
      causes[cause] += n;
    }
  }
  s << "\n  what the failures look like:";
  for (const auto& [cause, n] : causes) {
    s << "\n  " << std::setw(6) << n << "  " << cause;
  }
  s << "\n  every failing line: " << rerun;
  return s.str();
}

class Conformance : public ::testing::TestWithParam<test::KernelSet> {};

TEST_P(Conformance, PassesTheVerifyCases) {
  const test::KernelSet& set = GetParam();
  const test::OpenedKernelSet opened = test::open_kernel_set(set, kThreads);
  if (!opened.backend) {
    GTEST_SKIP() << set.name << ": " << opened.unavailable;
  }
  const VerifyOptions opt = conformance_options();
  const std::string rerun = reproduce(set, opt);
  std::printf("%s: %s\n", set.name.c_str(), rerun.c_str());
  const auto t0 = std::chrono::steady_clock::now();
  const VerifyReport rep = run_verify(*opened.backend, opt, /*log=*/nullptr);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: %d passed, %d failed, %d skipped in %.1f s\n", set.name.c_str(), rep.passed,
              rep.failed, rep.skipped, secs);
  EXPECT_EQ(rep.failed, 0) << set.name << " fails verify cases:" << failures_of(rep, rerun);
  EXPECT_GT(rep.passed, 0) << set.name << " passed no case: nothing was checked";
}

std::string name_of(const ::testing::TestParamInfo<test::KernelSet>& info) {
  return info.param.name;
}

// One instantiation per kind, so that CTest can label them (tests/CMakeLists.txt).
INSTANTIATE_TEST_SUITE_P(Host, Conformance,
                         ::testing::ValuesIn(test::kernel_sets(test::KernelSetKind::host)),
                         name_of);
INSTANTIATE_TEST_SUITE_P(Python, Conformance,
                         ::testing::ValuesIn(test::kernel_sets(test::KernelSetKind::python)),
                         name_of);
INSTANTIATE_TEST_SUITE_P(Gpu, Conformance,
                         ::testing::ValuesIn(test::kernel_sets(test::KernelSetKind::gpu)), name_of);

} // namespace
} // namespace attn
