// Tests of the schema check on a built (version 3) table, on the version-1 and version-2 tables
// that must still be read, and on broken ones: a missing or mistyped field is reported with its
// path.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "src/model/errors.h"
#include "src/tuning/table_schema.h"
#include "src/tuning/threshold_table.h"
#include "tests/tuning/table_fixtures.h"

namespace attn {
namespace {

using nlohmann::json;

json full_table() {
  json full = build_threshold_table(fixtures::two_points_and_held_out(),
                                    {{"device", {{"name", "synthetic"}}}}, 16);
  full["provenance"] = {
      {"device", {{"name", "synthetic"}}},     {"tool", {{"version", "v"}, {"git_hash", "g"}}},
      {"kernel_sources_sha256", "0"},          {"profile", {{"name", "p"}, {"hash", "h"}}},
      {"created_utc", "2026-01-01T00:00:00Z"}, {"timing_method", "synthetic"}};
  return full;
}

std::string schema_error_of(const json& t) {
  try {
    validate_table(t);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(TableSchema, AcceptsABuiltTableAndNamesTheFirstBadField) {
  const json full = full_table();
  EXPECT_EQ(full["version"], 5);
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
  broken["regret"]["held_out"]["vllm_cuda"]["mean"] = "low";
  try {
    validate_table(broken);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "threshold table: regret.held_out.vllm_cuda.mean: expected a finite number, got \"low\"");
  }
}

// Version 3: vLLM's CUDA rule is priced as vllm_cuda next to vLLM CPU's, the fitted rule may
// launch v2 without a partition (then its tiles count keys), and the kernels may name the
// engine rule they replace.
TEST(TableSchema, ChecksTheVersion3RulesAndPartitionlessV2) {
  const json full = full_table();
  json broken = full;
  broken["regret"]["sweep"].erase("vllm_cpu");
  EXPECT_EQ(schema_error_of(broken), "threshold table: regret.sweep.vllm_cpu: missing");
  broken = full;
  broken["regret"]["sweep"]["vllm"] = broken["regret"]["sweep"]["vllm_cuda"];
  broken["regret"]["sweep"].erase("vllm_cuda");
  EXPECT_EQ(schema_error_of(broken), "threshold table: regret.sweep.vllm_cuda: missing");
  broken = full;
  broken["rule"]["partition"] = nullptr;
  const std::string tiles = full["rule"]["tiles"];
  ASSERT_EQ(tiles.substr(tiles.size() - 10), "partitions");
  EXPECT_EQ(schema_error_of(broken), "threshold table: rule.tiles: unknown tiles definition \"" +
                                         tiles + "\" for a rule without a partition");
  json ok = full;
  ok["rule"]["partition"] = nullptr;
  ok["rule"]["tiles"] = tiles.substr(0, tiles.size() - 10) + "context_len";
  EXPECT_NO_THROW(validate_table(ok));
  broken = full;
  broken["rule"]["partition"] = 0;
  EXPECT_EQ(schema_error_of(broken), "threshold table: rule.partition: expected a positive "
                                     "partition size");
  ok = full;
  ok["provenance"]["kernels"] = {
      {"source", "built-in"}, {"name", "attn-tune"}, {"engine_rule", "vllm-cpu"}};
  EXPECT_NO_THROW(validate_table(ok));
  broken = ok;
  broken["provenance"]["kernels"]["engine_rule"] = nullptr;
  EXPECT_EQ(schema_error_of(broken),
            "threshold table: provenance.kernels.engine_rule: expected a string");
}

TEST(TableSchema, ChecksTheVersion2DecisionAndNoiseFields) {
  const json full = full_table();
  json broken = full;
  broken["decode"][0].erase("v2_intervals");
  EXPECT_EQ(schema_error_of(broken), "threshold table: decode[0].v2_intervals: missing");
  broken = full;
  broken["decode"][0]["v2_intervals"] = json::parse("[[2048, 512]]");
  EXPECT_EQ(schema_error_of(broken),
            "threshold table: decode[0].v2_intervals[0]: expected 1 <= from < to");
  broken = full;
  broken["decode"][0]["v2_intervals"] = json::parse("[[64, null], [2048, null]]");
  EXPECT_EQ(schema_error_of(broken),
            "threshold table: decode[0].v2_intervals[1]: intervals must be "
            "ascending, apart, and only the last may be open");
  broken = full;
  broken["decode"][0]["v2_intervals"] = json::parse("[[64, \"x\"]]");
  EXPECT_EQ(schema_error_of(broken),
            "threshold table: decode[0].v2_intervals[0]: expected [from, to] "
            "with a context length from and a context length or null to");
  // v2_from may be left out (a decision with no single threshold) but must not contradict.
  broken = full;
  broken["decode"][0]["v2_from"] = 512;
  EXPECT_EQ(schema_error_of(broken),
            "threshold table: decode[0].v2_from: does not match v2_intervals");
  json ok = full;
  ok["decode"][0].erase("v2_from");
  ok["decode"][0]["v2_intervals"] = json::parse("[[1, 2048], [8192, null]]");
  EXPECT_NO_THROW(validate_table(ok));
  broken = full;
  broken["decode"][1]["measured"][0].erase("within_noise");
  EXPECT_EQ(schema_error_of(broken),
            "threshold table: decode[1].measured[0].within_noise: missing");
  broken = full;
  broken["held_out"][0]["noise"] = "small";
  EXPECT_EQ(schema_error_of(broken), "threshold table: held_out[0].noise: expected a finite number, got \"small\"");
  broken = full;
  broken["regret"]["sweep"]["table_lookup"].erase("beyond_noise");
  EXPECT_EQ(schema_error_of(broken),
            "threshold table: regret.sweep.table_lookup.beyond_noise: missing");
  broken = full;
  broken["version"] = 6;
  EXPECT_EQ(schema_error_of(broken), "threshold table: version: expected 1 to 5, got 6");
}

TEST(TableSchema, NoisyDecisionsAreOptionalAndChecked) {
  // batch 1: v1 beyond noise at 512, within noise at 2048, v2 beyond noise at 8192.
  const KernelConfig v1{Family::decode_v1, {}};
  const KernelConfig v2{Family::decode_v2, {{"partition", 512}}};
  json t = full_table();
  const json prov = t["provenance"];
  t = build_threshold_table({fixtures::spread_rec(1, 512, 8, v1, 1e-5, 1e-7),
                             fixtures::spread_rec(1, 512, 8, v2, 2e-5, 1e-7),
                             fixtures::spread_rec(1, 2048, 8, v1, 4e-5, 2e-6),
                             fixtures::spread_rec(1, 2048, 8, v2, 3.95e-5, 1e-6),
                             fixtures::spread_rec(1, 8192, 8, v1, 16e-5, 2e-6),
                             fixtures::spread_rec(1, 8192, 8, v2, 9e-5, 2e-6)},
                            prov, 16);
  t["provenance"] = prov;
  ASSERT_EQ(t["decode"][0]["noisy_decisions"].size(), 1u);
  EXPECT_NO_THROW(validate_table(t));
  // Tables made before the list existed have none: still a valid table.
  json older = t;
  older["decode"][0].erase("noisy_decisions");
  EXPECT_NO_THROW(validate_table(older));
  json broken = t;
  broken["decode"][0]["noisy_decisions"] = "none";
  EXPECT_EQ(schema_error_of(broken), "threshold table: decode[0].noisy_decisions: expected a list");
  broken = t;
  broken["decode"][0]["noisy_decisions"][0]["decision"] = "v3";
  EXPECT_EQ(schema_error_of(broken),
            "threshold table: decode[0].noisy_decisions[0].decision: expected \"v1\" or \"v2\"");
  broken = t;
  broken["decode"][0]["noisy_decisions"][0].erase("margin");
  EXPECT_EQ(schema_error_of(broken),
            "threshold table: decode[0].noisy_decisions[0].margin: missing");
  broken = t;
  broken["decode"][0]["noisy_decisions"][0]["switch_at"] = "soon";
  EXPECT_EQ(schema_error_of(broken), "threshold table: decode[0].noisy_decisions[0].switch_at: "
                                     "expected an integer from 1 to 10000000, got \"soon\"");
  broken = t;
  broken["decode"][0]["noisy_decisions"][0]["context_len"] = 8192;
  EXPECT_EQ(schema_error_of(broken), "threshold table: decode[0].noisy_decisions[0].context_len: "
                                     "not a measured length within noise");
}

// Version 2 priced vLLM's CUDA rule as "vllm" and had no vLLM CPU rule; a rule without a
// partition is version 3's.
TEST(TableSchema, StillAcceptsVersion2Tables) {
  const json t = json::parse(std::ifstream(std::filesystem::path(ATTN_SOURCE_DIR) / "python" /
                                           "testdata" / "synthetic_table_v2.json"));
  ASSERT_EQ(t["version"], 2);
  EXPECT_NO_THROW(validate_table(t));
  json broken = t;
  broken["regret"]["held_out"].erase("vllm");
  EXPECT_EQ(schema_error_of(broken), "threshold table: regret.held_out.vllm: missing");
  broken = t;
  broken["rule"]["partition"] = nullptr;
  EXPECT_EQ(schema_error_of(broken), "threshold table: rule.partition: expected an integer, got null");
}

TEST(TableSchema, StillAcceptsVersion1Tables) {
  // The reader fixture kept at version 1 and every table the project ships (made before
  // version 2) must keep passing.
  std::vector<std::filesystem::path> files = {std::filesystem::path(ATTN_SOURCE_DIR) / "python" /
                                              "testdata" / "synthetic_table_v1.json"};
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::path(ATTN_SOURCE_DIR) / "results")) {
    if (e.path().extension() == ".json") {
      files.push_back(e.path());
    }
  }
  ASSERT_GE(files.size(), 2u);
  for (const auto& f : files) {
    const json t = json::parse(std::ifstream(f));
    if (t["version"] != 1) {
      continue; // a shipped table regenerated at the current version is checked by the sweep
    }
    EXPECT_NO_THROW(validate_table(t)) << f;
    // Version 1 has no intervals or noise fields, and still needs its v2_from.
    json broken = t;
    broken["decode"][0].erase("v2_from");
    EXPECT_EQ(schema_error_of(broken), "threshold table: decode[0].v2_from: missing") << f;
  }
}

} // namespace
} // namespace attn
