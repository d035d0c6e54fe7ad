// Tests of the text `attn-tune table show` prints: the device, each shape point's crossover and
// the fitted rule, on a table built from synthetic records.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/cli/table_text.h"
#include "src/tuning/threshold_table.h"
#include "tests/tuning/table_fixtures.h"

namespace attn {
namespace {

using fixtures::rec;
using nlohmann::json;

TEST(ThresholdTable, ShowExplainsTheTable) {
  const KernelConfig v1{Family::decode_v1, {}};
  const KernelConfig v2{Family::decode_v2, {{"partition", 512}}};
  std::vector<MeasurementRecord> rs = {rec(1, 512, 8, v1, 1.0), rec(1, 512, 8, v2, 2.0),
                                       rec(1, 4096, 8, v1, 4.0), rec(1, 4096, 8, v2, 2.0)};
  const json prov = {{"device",
                      {{"name", "Synthetic GPU"},
                       {"id", "cuda:0"},
                       {"sm_count", 16},
                       {"compute_capability", "9.0"}}},
                     {"profile", {{"name", "p"}, {"hash", "0123"}}},
                     {"tool", {{"version", "0.1.0"}, {"git_hash", "abc"}}},
                     {"kernel_sources_sha256", std::string(64, 'f')},
                     {"created_utc", "2026-01-01T00:00:00Z"},
                     {"timing_method", "synthetic"}};
  const std::string text = cli::describe_table(build_threshold_table(rs, prov, 16));
  EXPECT_NE(text.find("Synthetic GPU (cuda:0), 16 SMs"), std::string::npos) << text;
  EXPECT_NE(text.find("fp16 d=128 bs=16 kvh=8 gqa=4 batch=1: v2 from ctx 4096"), std::string::npos)
      << text;
  EXPECT_NE(text.find("fitted rule: use v2 (partition 512) when"), std::string::npos) << text;
}

} // namespace
} // namespace attn
