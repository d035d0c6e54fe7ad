// Options that name a file a command writes when it is done (verify --junit, replay --save):
// checked when the command line is read, so that a typo in the path is exit 2 before the work,
// not after it (a whole verify run lost, its verdict replaced by a usage error).
#pragma once
#include <CLI/CLI.hpp>

namespace attn::cli {

// Refuses an empty path, a folder, and a path whose folder does not exist or cannot be written.
[[nodiscard]] const CLI::Validator& output_file();

} // namespace attn::cli
