// Tests of the atomic JSON writer: a rewrite replaces the file whole and leaves no temporary
// file behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "src/io/atomic_file.h"

namespace attn {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(AtomicFile, WritesAtomically) {
  const fs::path dir = fs::temp_directory_path() / ("attn_tt_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "t.json").string();
  write_json_atomically(path, {{"a", 1}});
  write_json_atomically(path, {{"a", 2}});
  EXPECT_EQ(json::parse(std::ifstream(path))["a"], 2);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1) << "no temporary file left behind";
  fs::remove_all(dir);
}

} // namespace
} // namespace attn
