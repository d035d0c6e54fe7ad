// JSON parsing that refuses an object with the same key twice. nlohmann/json (as RFC 8259
// allows) keeps the last of them; for a hand-written profile or trace that silently drops a
// value the author meant (`"batch": 1, ..., "batch": 2`), so documents people write go through
// here instead.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace attn {

// The document in `text`. Throws nlohmann::json::parse_error for text that is not JSON, and
// DuplicateKey for an object that repeats a key.
nlohmann::json parse_json_unique_keys(const std::string& text);

struct DuplicateKey : std::runtime_error {
  // path: where the repeated key is, as "decode.batch" or "held_out[1].context_len".
  explicit DuplicateKey(const std::string& path)
      : std::runtime_error(path + ": the key appears twice in its object (JSON keeps only the "
                                  "last; give it once)"),
        path(path) {}
  std::string path;
};

} // namespace attn
