// results.jsonl: a half-written last line is ignored and reported; a corrupt complete line is an
// input error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "src/model/errors.h"
#include "src/tuning/results_file.h"

namespace attn {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  fs::path d =
      fs::temp_directory_path() / ("attn_test_results_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

TEST(ResultsFile, ReadsResultsWithATruncatedTail) {
  const fs::path dir = fresh_dir("read");
  fs::create_directories(dir);
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

} // namespace
} // namespace attn
