// The one way attn-tune writes a result file (tables, JUnit reports, replay dumps): a temporary
// file next to the target, written, fsynced and renamed over it, so a reader never sees half.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace attn {

// Writes `bytes` to `path` atomically. The error rule every writer shares: when the file cannot
// be created or put in place (a missing folder, no permission: the path the user gave) it throws
// InputError (exit 2); when writing or flushing fails midway (disk full, I/O error) it throws
// std::runtime_error (exit 4). Either way the temporary file is removed and `path` is untouched.
void write_file_atomically(const std::string& path, const void* bytes, std::size_t size);
void write_file_atomically(const std::string& path, std::string_view text);

// Whether an atomic write of `path` could start: its temporary file is created and removed, and
// the error is write_file_atomically's (InputError, naming the reason) when it cannot be. A
// command that writes `path` at its end asks before its work, not after.
void check_can_write(const std::string& path);

// Several files (path, bytes) written all or none: every one is written and flushed to a
// temporary file first, and only when all are there are they renamed into place.
void write_files_atomically(const std::vector<std::pair<std::string, std::string>>& files);

// Removes what write_file_atomically leaves when it is killed between creating its temporary
// file and renaming it: the regular files of `dir` named NAME.tmp.XXXXXX (mkstemp's six
// characters). The caller holds the folder's lock, so no writer is using one.
void remove_stale_temporaries(const std::string& dir);

// `j` as indented JSON plus a newline, atomically.
void write_json_atomically(const std::string& path, const nlohmann::json& j);

// Replaces the files `files` (name, bytes) of folder `dir` together: a reader sees all the old
// ones or all the new ones, never a mix, and a command killed or failing midway leaves the old
// set. The files are written into a new generation folder `dir`/.attn-tune-gen-XXXXXX, and each
// name in `dir` is a symbolic link through `dir`/.attn-tune-current, a link to the generation,
// which one rename switches. The first time, the files already there are kept as a generation
// of their own first (hard links), so every step shows a complete set. Older generations are
// removed afterwards. Errors as write_file_atomically. The caller holds the folder's lock.
void replace_files_together(const std::string& dir,
                            const std::vector<std::pair<std::string, std::string>>& files);

} // namespace attn
