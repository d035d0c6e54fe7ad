// results.jsonl: a half-written last line is ignored and reported; a corrupt complete line is an
// input error; records keep the timing quartiles that tell a win from noise.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "src/model/errors.h"
#include "src/model/kernel_config.h"
#include "src/model/workload.h"
#include "src/tuning/results_file.h"
#include "tests/support/files.h"

namespace attn {
namespace {

namespace fs = std::filesystem;

TEST(ResultsFile, ReadsResultsWithATruncatedTail) {
  const fs::path dir = test::fresh_dir("results_read");
  const fs::path f = dir / "results.jsonl";
  {
    std::ofstream o(f, std::ios::binary);
    o << R"({"type":"header","schema":"attn-tune/results","version":1})"
      << "\n"
      << R"({"type":"measurement","workload_key":"a","config_key":"b"})"
      << "\n"
      << R"({"type":"measurem)";
  }
  const ResultsFile r = read_results(f.string());
  EXPECT_TRUE(r.truncated_tail);
  EXPECT_EQ(r.lines.size(), 1u);
  EXPECT_LT(r.valid_bytes, fs::file_size(f));
  {
    std::ofstream o(f, std::ios::binary | std::ios::app);
    o << "\n{not json}\n";
  }
  EXPECT_THROW((void)read_results(f.string()), InputError);
  fs::remove_all(dir);
}

TEST(ResultsFile, RecordsKeepTheQuartilesOrFallBackToTheMedian) {
  Workload w;
  w.phase = Phase::decode;
  const KernelConfig v1{Family::decode_v1, {}};
  const KernelConfig v2{Family::decode_v2, {{"partition", 512}}};
  auto line = [&](const KernelConfig& c, const nlohmann::json& timing) {
    return nlohmann::json{{"type", "measurement"}, {"workload_key", w.key()},
                          {"config_key", c.key()}, {"workload", w.to_json()},
                          {"config", c.to_json()}, {"status", "ok"},
                          {"timing", timing}};
  };
  const auto rs = to_records(
      {line(v1, {{"median_s", 2e-6}, {"p25_s", 1.9e-6}, {"p75_s", 2.2e-6}, {"method", "m"}}),
       line(v2, {{"median_s", 3e-6}, {"method", "m"}})});
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_DOUBLE_EQ(rs[0].p25_s, 1.9e-6);
  EXPECT_DOUBLE_EQ(rs[0].p75_s, 2.2e-6);
  // A line written without quartiles has no spread: only exact ties are within noise.
  EXPECT_DOUBLE_EQ(rs[1].p25_s, 3e-6);
  EXPECT_DOUBLE_EQ(rs[1].p75_s, 3e-6);
}

} // namespace
} // namespace attn
