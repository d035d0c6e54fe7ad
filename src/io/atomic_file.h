// The one way attn-tune writes a result file (tables, JUnit reports, replay dumps): a temporary
// file next to the target, written, fsynced and renamed over it, so a reader never sees half.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace attn {

// Writes `bytes` to `path` atomically. The error rule every writer shares: when the file cannot
// be created or put in place (a missing folder, no permission: the path the user gave) it throws
// InputError (exit 2); when writing or flushing fails midway (disk full, I/O error) it throws
// std::runtime_error (exit 4). Either way the temporary file is removed and `path` is untouched.
void write_file_atomically(const std::string& path, const void* bytes, std::size_t size);
void write_file_atomically(const std::string& path, std::string_view text);

// `j` as indented JSON plus a newline, atomically.
void write_json_atomically(const std::string& path, const nlohmann::json& j);

} // namespace attn
