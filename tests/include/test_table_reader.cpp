// Tests of the header-only table reader (include/attn_tune) on the synthetic fixture table that
// the Python reader's test also reads: exact points, nearest-point fallback, schema checks.
// ATTN_WRITE_FIXTURE=path regenerates the fixture (python/testdata/synthetic_table.json).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "include/attn_tune/threshold_table_reader.hpp"
#include "src/io/atomic_file.h"
#include "src/tuning/threshold_table.h"

namespace attn {
namespace {

using nlohmann::json;

const std::string kFixture = std::string(ATTN_SOURCE_DIR) + "/python/testdata/synthetic_table.json";

// Synthetic timings in microseconds for a 16-SM device: v1 runs batch*kvh blocks over the whole
// context; v2 runs batch*kvh*partitions blocks of P keys plus a reduce. A sliding window caps
// the keys read at 4097. The v2 reduce costs a fixed 12 us, so v2 only pays off at length.
double synthetic_us(int batch, int kvh, int ctx, int window, int partition) {
  const int keys = window >= 0 ? std::min(ctx, window + 1) : ctx;
  auto waves = [](double tiles) { return std::ceil(tiles / 16.0); };
  if (partition == 0) {
    return waves(double(batch) * kvh) * keys * 0.01 + 3;
  }
  return waves(double(batch) * kvh * std::ceil(double(keys) / partition)) * partition * 0.01 + 12;
}

json make_fixture() {
  std::vector<MeasurementRecord> rs;
  auto add = [&](int batch, int kvh, int ctx, int window, bool held_out) {
    for (int part : {0, 256, 512}) {
      MeasurementRecord r;
      r.workload.phase = Phase::decode;
      r.workload.batch = batch;
      r.workload.context_len = ctx;
      r.workload.held_out = held_out;
      r.workload.params.num_kv_heads = kvh;
      r.workload.params.num_heads = kvh * 4;
      r.workload.params.head_dim = 128;
      r.workload.params.block_size = 16;
      r.workload.params.dtype = DType::f16;
      r.workload.params.window_left = window;
      r.config = part == 0 ? KernelConfig{Family::decode_v1, {}}
                           : KernelConfig{Family::decode_v2, {{"partition", part}}};
      r.status = "ok";
      r.median_s = synthetic_us(batch, kvh, ctx, window, part) * 1e-6;
      r.method = "synthetic formula";
      rs.push_back(r);
    }
  };
  for (int kvh : {1, 8}) {
    for (int batch : {1, 8, 64}) {
      for (int ctx : {512, 2048, 8192, 32768}) {
        add(batch, kvh, ctx, -1, false);
      }
    }
  }
  for (int ctx : {512, 2048, 8192, 32768}) {
    add(1, 8, ctx, 4096, false);
  }
  add(4, 8, 4000, -1, true);
  add(32, 1, 20000, -1, true);
  const json prov = {
      {"device",
       {{"backend", "cuda"},
        {"id", "cuda:0"},
        {"name", "Synthetic fixture GPU"},
        {"uuid", "GPU-00000000-0000-0000-0000-000000000000"},
        {"sm_count", 16},
        {"compute_capability", "9.0"}}},
      {"tool", {{"name", "attn-tune"}, {"version", "fixture"}, {"git_hash", "fixture"}}},
      {"kernel_sources_sha256", std::string(64, '0')},
      {"profile", {{"name", "synthetic"}, {"hash", "0000000000000000"}}},
      {"created_utc", "2026-01-01T00:00:00Z"},
      {"timing_method", "synthetic formula (tests/include/test_table_reader.cpp)"},
      {"seed", 1}};
  return build_threshold_table(rs, prov, 16);
}

TEST(TableReader, FixtureIsWhatTheBuilderMakes) {
  const json fresh = make_fixture();
  if (const char* out = std::getenv("ATTN_WRITE_FIXTURE")) {
    write_json_atomically(out, fresh);
  }
  std::ifstream f(kFixture);
  ASSERT_TRUE(f) << kFixture;
  // Compare after a round trip through text so that doubles print the same way.
  EXPECT_NO_THROW(validate_table(fresh));
  EXPECT_EQ(json::parse(f), json::parse(fresh.dump(1)))
      << "regenerate with ATTN_WRITE_FIXTURE=" << kFixture;
}

attn_tune::Query query(int batch, int ctx, int kvh = 8, int heads = 32, const char* dtype = "fp16",
                       int window = -1) {
  attn_tune::Query q;
  q.batch = batch;
  q.context_len = ctx;
  q.num_heads = heads;
  q.num_kv_heads = kvh;
  q.head_dim = 128;
  q.block_size = 16;
  q.dtype = dtype;
  q.window_left = window;
  return q;
}

TEST(TableReader, ExactPointsFollowTheCrossover) {
  const auto r = attn_tune::ThresholdTableReader::from_file(kFixture);
  // batch 1, kvh 8 at 512: v1 = 5.12 + 3 = 8.12 us; v2(256) = 2.56 + 12 = 14.56 us: v1.
  auto c = r.lookup(query(1, 512));
  EXPECT_TRUE(c.exact_point);
  EXPECT_EQ(c.family, "decode_v1");
  EXPECT_EQ(c.config_key, "decode_v1[]");
  EXPECT_EQ(c.point["v2_from"], 2048);
  // At 2048: v1 = 23.48 us; v2(256) = 4 waves * 2.56 + 12 = 22.24 us (v2(512) ties; the first
  // measured wins the tie).
  c = r.lookup(query(1, 2048));
  EXPECT_EQ(c.family, "decode_v2");
  EXPECT_EQ(c.config_key, "decode_v2[partition=256]");
  // batch 64, kvh 8: 512 blocks already fill 32 waves; v2 only adds work: never.
  c = r.lookup(query(64, 32768));
  EXPECT_TRUE(c.exact_point);
  EXPECT_EQ(c.family, "decode_v1");
  EXPECT_EQ(c.config_key, "decode_v1[]");
  EXPECT_EQ(c.point["v2_from"], "never");
  // batch 8, kvh 1: v1 = ctx*0.01+3; v2 wins once partitions fill the SMs: from 2048.
  c = r.lookup(query(8, 512, 1, 4));
  EXPECT_EQ(c.family, "decode_v1");
  c = r.lookup(query(8, 2048, 1, 4));
  EXPECT_EQ(c.family, "decode_v2");
  EXPECT_EQ(c.point["v2_from"], 2048);
}

TEST(TableReader, FallsBackToTheNearestPoint) {
  const auto r = attn_tune::ThresholdTableReader::from_file(kFixture);
  // batch 6 is nearest to batch 8 (log2 distance 0.415 vs 1.585 to batch 1).
  auto c = r.lookup(query(6, 3000));
  EXPECT_FALSE(c.exact_point);
  EXPECT_EQ(c.point["batch"], 8);
  EXPECT_NEAR(c.distance, std::log2(8.0 / 6.0), 1e-12);
  EXPECT_EQ(c.measured_context, 2048); // log2 distance 0.55 to 2048, 1.45 to 8192
  // Another dtype still finds the same shape (dtype mismatch costs a fixed penalty).
  c = r.lookup(query(8, 2048, 8, 32, "bf16"));
  EXPECT_EQ(c.point["batch"], 8);
  EXPECT_NEAR(c.distance, attn_tune::kCategoryPenalty, 1e-12);
  // A windowed call matches the windowed point although its batch differs.
  c = r.lookup(query(8, 8192, 8, 32, "fp16", 4096));
  EXPECT_EQ(c.point["window_left"], 4096);
  EXPECT_EQ(c.point["batch"], 1);
  // Heads between measured GQA ratios: ratio 2 vs the table's 4.
  c = r.lookup(query(1, 512, 8, 16));
  EXPECT_NEAR(c.distance, 1.0, 1e-12);
}

TEST(TableReader, RejectsWhatIsNotATable) {
  EXPECT_THROW(attn_tune::ThresholdTableReader(json::object()), std::runtime_error);
  json t = json::parse(std::ifstream(kFixture));
  t["version"] = 99;
  EXPECT_THROW(attn_tune::ThresholdTableReader{t}, std::runtime_error);
  EXPECT_THROW(attn_tune::ThresholdTableReader::from_file("/nonexistent.json"), std::runtime_error);
  const auto r = attn_tune::ThresholdTableReader::from_file(kFixture);
  EXPECT_THROW((void)r.lookup(query(0, 10)), std::invalid_argument);
}

} // namespace
} // namespace attn
