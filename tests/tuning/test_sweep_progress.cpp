// The sweep's progress line (sweep_progress.h) as a log shows it: count, percent, and an ETA that
// never reads "0s" (under a second left is "<1s", nothing left is "done").
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "src/tuning/sweep_progress.h"

using namespace attn;

namespace {

std::string lines_of(const std::function<void(SweepProgress&)>& steps, int total,
                     bool open_ended = false) {
  char* buf = nullptr;
  std::size_t size = 0;
  std::FILE* f = open_memstream(&buf, &size);
  {
    SweepProgress p(f, /*tty=*/false, total, 0, open_ended);
    steps(p);
    p.finish();
  }
  std::fclose(f);
  std::string out(buf, size);
  std::free(buf);
  return out;
}

} // namespace

TEST(SweepProgress, ShortRunsSayUnderASecondThenDone) {
  const std::string out = lines_of(
      [](SweepProgress& p) {
        p.step("ok", "first");
        p.step("ok", "second");
      },
      2);
  EXPECT_EQ(out, "[1/2 50% ETA <1s] ok first\n[2/2 100% done] ok second\n");
}

TEST(SweepProgress, DurationsAreSecondsMinutesOrHours) {
  EXPECT_EQ(fmt_duration(42.4), "42s");
  EXPECT_EQ(fmt_duration(65), "1m05s");
  EXPECT_EQ(fmt_duration(3 * 3600 + 7 * 60), "3h07m");
}

TEST(SweepProgress, AnOpenEndedSearchCountsTimingsWithoutAnEta) {
  const std::string out = lines_of([](SweepProgress& p) { p.step("ok", "x"); }, 10, true);
  EXPECT_EQ(out, "[1 timing, 0s elapsed] ok x\n");
}
