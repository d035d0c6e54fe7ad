// Tests of the version-1 schema check on a built table: a complete table passes, and a missing
// or mistyped field is reported with its path.
#include <gtest/gtest.h>

#include "src/model/errors.h"
#include "src/tuning/table_schema.h"
#include "src/tuning/threshold_table.h"
#include "tests/tuning/table_fixtures.h"

namespace attn {
namespace {

using nlohmann::json;

TEST(TableSchema, AcceptsABuiltTableAndNamesTheFirstBadField) {
  const json t = build_threshold_table(fixtures::two_points_and_held_out(),
                                       {{"device", {{"name", "synthetic"}}}}, 16);
  json full = t;
  full["provenance"] = {
      {"device", {{"name", "synthetic"}}},     {"tool", {{"version", "v"}, {"git_hash", "g"}}},
      {"kernel_sources_sha256", "0"},          {"profile", {{"name", "p"}, {"hash", "h"}}},
      {"created_utc", "2026-01-01T00:00:00Z"}, {"timing_method", "synthetic"}};
  EXPECT_NO_THROW(validate_table(full));
  json broken = full;
  broken["decode"][1]["measured"][2]["best"].erase("median_s");
  try {
    validate_table(broken);
    FAIL() << "a missing field must be reported";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "threshold table: decode[1].measured[2].best.median_s: missing");
  }
  broken = full;
  broken["decode"][0]["v2_from"] = "sometimes";
  EXPECT_THROW(validate_table(broken), InputError);
  broken = full;
  broken["regret"]["held_out"]["vllm"]["mean"] = "low";
  try {
    validate_table(broken);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "threshold table: regret.held_out.vllm.mean: expected a number");
  }
}

} // namespace
} // namespace attn
