// Tests of the atomic JSON writer: a rewrite replaces the file whole and leaves no temporary
// file behind.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>
#include <unistd.h>

#include "src/io/atomic_file.h"
#include "src/model/errors.h"

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

// A kill between a writer's mkstemp and its rename leaves NAME.tmp.XXXXXX; a sweep clears them
// from its folder, and nothing else.
TEST(AtomicFile, StaleTemporariesAreRemovedAndNothingElse) {
  const fs::path dir = fs::temp_directory_path() / ("attn_stale_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* n :
       {"threshold_table.json.tmp.Ab12Cd", "report.html.tmp.xYz789", "threshold_table.json",
        "notes.tmp.short", "my.tmp.folder1", ".tmp.abcdef"}) {
    std::ofstream(dir / n) << "x";
  }
  fs::remove(dir / "my.tmp.folder1");
  fs::create_directories(dir / "my.tmp.folder1"); // a folder of that shape stays
  remove_stale_temporaries(dir.string());
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) {
    left.push_back(e.path().filename().string());
  }
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{".tmp.abcdef", "my.tmp.folder1", "notes.tmp.short",
                                            "threshold_table.json"}));
  fs::remove_all(dir);
}

// A set of files switches as one: the first time, the plain files already there become a
// generation of their own; every later switch is one rename, and a reader through the names
// sees either set whole.
TEST(AtomicFile, ReplacesFilesTogether) {
  const fs::path dir = fs::temp_directory_path() / ("attn_tt_set_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "a.txt") << "a0";
  std::ofstream(dir / "b.txt") << "b0";
  auto read = [&](const char* n) {
    std::string s;
    std::getline(std::ifstream(dir / n), s);
    return s;
  };
  replace_files_together(dir.string(), {{"a.txt", "a1"}, {"b.txt", "b1"}});
  EXPECT_EQ(read("a.txt"), "a1");
  EXPECT_EQ(read("b.txt"), "b1");
  replace_files_together(dir.string(), {{"a.txt", "a2"}, {"b.txt", "b2"}});
  EXPECT_EQ(read("a.txt"), "a2");
  EXPECT_EQ(read("b.txt"), "b2");
  // What a writer killed midway left is cleared by the next one.
  std::ofstream(dir / "a.txt.tmp.123456") << "half";
  std::ofstream(dir / ".attn-tune-current.tmp.99") << "";
  fs::create_directories(dir / ".attn-tune-gen-killed");
  // A writer that renames a plain file over one name (a sweep rewriting its table) is taken in.
  write_file_atomically((dir / "b.txt").string(), std::string("b3"));
  replace_files_together(dir.string(), {{"a.txt", "a4"}, {"b.txt", "b4"}});
  EXPECT_EQ(read("a.txt"), "a4");
  EXPECT_EQ(read("b.txt"), "b4");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 4u) << "no older generation or temporary file is left";
  EXPECT_EQ(names[0], ".attn-tune-current");
  EXPECT_EQ(names[1].rfind(".attn-tune-gen-", 0), 0u);
  fs::remove_all(dir);
}

// Several files all or none: none is in place when one cannot be written.
TEST(AtomicFile, WritesFilesAllOrNone) {
  const fs::path dir = fs::temp_directory_path() / ("attn_tt_all_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  EXPECT_THROW(write_files_atomically({{(dir / "x.csv").string(), "x"},
                                       {(dir / "missing" / "y.csv").string(), "y"}}),
               InputError);
  EXPECT_TRUE(fs::is_empty(dir));
  write_files_atomically({{(dir / "x.csv").string(), "x"}, {(dir / "y.csv").string(), "y"}});
  EXPECT_TRUE(fs::exists(dir / "x.csv") && fs::exists(dir / "y.csv"));
  fs::remove_all(dir);
}

} // namespace
} // namespace attn
