#include "src/cli/output_option.h"

#include <filesystem>
#include <string>
#include <system_error>
#include <unistd.h>

namespace attn::cli {

namespace fs = std::filesystem;

const CLI::Validator& output_file() {
  static const CLI::Validator v(
      [](const std::string& s) -> std::string {
        if (s.empty()) {
          return "is empty: name the file to write";
        }
        std::error_code ec;
        if (fs::is_directory(s, ec)) {
          return "'" + s + "' is a folder: name the file to write in it";
        }
        const fs::path dir = fs::path(s).has_parent_path() ? fs::path(s).parent_path() : ".";
        if (!fs::is_directory(dir, ec)) {
          return "cannot write '" + s + "': the folder '" + dir.string() + "' does not exist";
        }
        if (::access(dir.c_str(), W_OK) != 0) {
          return "cannot write '" + s + "': the folder '" + dir.string() + "' is not writable";
        }
        return {};
      },
      "", "output file");
  return v;
}

} // namespace attn::cli
