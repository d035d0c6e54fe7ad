// Files for tests: scratch folders under the temporary directory, named per process so that
// tests running side by side under CTest never share one, and whole files read back as text.
#pragma once
#include <cstdio>
#include <filesystem>
#include <string>

#include <unistd.h>

namespace attn::test {

// `<tmp>/attn_test_<name>_<pid>`, removed with anything in it and not created: for outputs that
// the code under test must create itself.
[[nodiscard]] inline std::filesystem::path fresh_path(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() /
           ("attn_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d;
}

// The same folder, created empty.
[[nodiscard]] inline std::filesystem::path fresh_dir(const std::string& name) {
  auto d = fresh_path(name);
  std::filesystem::create_directories(d);
  return d;
}

// Everything left to read from `f`.
[[nodiscard]] inline std::string read_rest(std::FILE* f) {
  std::string s;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) {
    s.append(buf, n);
  }
  return s;
}

// The whole file as bytes; empty when it cannot be opened.
[[nodiscard]] inline std::string read_file(const std::filesystem::path& p) {
  std::FILE* f = std::fopen(p.c_str(), "rb");
  if (f == nullptr) {
    return "";
  }
  std::string s = read_rest(f);
  std::fclose(f);
  return s;
}

// Everything written to `out` (a std::tmpfile() handed to code that logs), which is closed.
[[nodiscard]] inline std::string drain(std::FILE* out) {
  std::rewind(out);
  std::string s = read_rest(out);
  std::fclose(out);
  return s;
}

} // namespace attn::test
