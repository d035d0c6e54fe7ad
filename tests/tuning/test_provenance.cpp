// The table's one timing-method line, summarised over its measurements' methods.
#include <gtest/gtest.h>

#include "src/backends/timing.h"
#include "src/tuning/provenance.h"

namespace attn {
namespace {

TEST(Provenance, ByteCountsAreExactBelowAMebibyte) {
  EXPECT_EQ(mib_text(512), "512 B");
  EXPECT_EQ(mib_text(192 * 1024), "192 KiB");
  EXPECT_EQ(mib_text(3 * (1 << 20) / 2), "1.5 MiB");
  EXPECT_EQ(mib_text(uint64_t(513) << 20), "513 MiB");
}

TEST(Provenance, OneMethodWithDifferentFlushesBecomesOneLineWithARange) {
  const std::string a = "steady_clock, 2 threads, the 192 KiB it touches flushed before each rep";
  const std::string b = "steady_clock, 2 threads, the 513 MiB it touches flushed before each rep";
  const std::string c = "steady_clock, 2 threads, the 1.5 MiB it touches flushed before each rep";
  EXPECT_EQ(summarise_timing_methods({a, b, c}),
            "steady_clock, 2 threads, the 192 KiB to 513 MiB it touches flushed before each rep");
  EXPECT_EQ(summarise_timing_methods({a, a}), a);
  EXPECT_EQ(summarise_timing_methods({}), "");
}

TEST(Provenance, DifferentMethodsAreListedWithTheirCounts) {
  const std::string held = "cuda-events, stream held, L2 flushed (120 MiB clean read)";
  const std::string unheld = "cuda-events, stream not held (the call synchronises the host), L2 "
                             "flushed (120 MiB clean read)";
  EXPECT_EQ(summarise_timing_methods({held, unheld, held}),
            held + " (2 measurements); " + unheld + " (1 measurements)");
}

} // namespace
} // namespace attn
