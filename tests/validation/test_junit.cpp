// verify's JUnit file: what a CI reporter shows for a case group that passed with some cases
// skipped, one skipped whole, one with a wrong result and one whose cases all crashed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "src/validation/junit.h"

namespace attn {
namespace {

std::string junit_of(const VerifyReport& r) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("attn_junit_" + std::to_string(::getpid()) + ".xml");
  write_junit(path.string(), {r}, 1.5);
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  std::filesystem::remove(path);
  return s.str();
}

VerifyTestcase group(const std::string& config, int passed, int failed, int skipped, int faults) {
  VerifyTestcase tc;
  tc.device = "cpu";
  tc.family = "decode_v2";
  tc.config = config;
  tc.group = "edges";
  tc.passed = passed;
  tc.failed = failed;
  tc.skipped = skipped;
  tc.faults = faults;
  return tc;
}

TEST(JUnit, SkipsFailuresAndFaultsEachSayWhy) {
  VerifyReport r;
  VerifyTestcase some = group("decode_v2[partition=256]", 5, 0, 2, 0);
  some.skip_reason = "block_size 48 is <not> supported";
  VerifyTestcase all = group("decode_v2[partition=512]", 0, 0, 7, 0);
  all.skip_reason = "head_dim 96 is not supported";
  VerifyTestcase wrong = group("decode_v2[partition=1024]", 3, 1, 0, 0);
  wrong.failures = {"ctx=257: out[0,1,2] = 3 (want 2)"};
  VerifyTestcase crashed = group("decode_v2[partition=64]", 0, 2, 0, 2);
  crashed.failures = {"ctx=1: crashed its worker (SIGSEGV)", "ctx=2: crashed its worker (SIGSEGV)"};
  r.testcases = {some, all, wrong, crashed};
  const std::string x = junit_of(r);

  EXPECT_NE(x.find("tests=\"4\" failures=\"1\" errors=\"1\" skipped=\"1\""), std::string::npos)
      << x;
  // A group that passed with some cases skipped: not skipped itself, and its output says which
  // reason (escaped), so a reader of a green gate sees what it did not test.
  EXPECT_NE(x.find("<system-out>5 passed, 0 failed, 2 skipped (block_size 48 is &lt;not&gt; "
                   "supported)</system-out>"),
            std::string::npos)
      << x;
  // Skipped whole: a <skipped> with the reason.
  EXPECT_NE(x.find("<skipped message=\"head_dim 96 is not supported\"/>"), std::string::npos) << x;
  // A wrong result is a failure of type mismatch; cases that all crashed are an error, type fault.
  EXPECT_NE(x.find("<failure message=\"1 of 4 cases failed\" type=\"mismatch\">ctx=257"),
            std::string::npos)
      << x;
  EXPECT_NE(x.find("<error message=\"2 of 2 cases failed (2 crashed, hung or could not run)\" "
                   "type=\"fault\">"),
            std::string::npos)
      << x;
}

} // namespace
} // namespace attn
