// JSON parsing that refuses an object with the same key twice. nlohmann/json (as RFC 8259
// allows) keeps the last of them; for a hand-written profile or trace that silently drops a
// value the author meant (`"batch": 1, ..., "batch": 2`), so documents people write go through
// here instead.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace attn {

// nlohmann/json parses and frees a document of any depth without recursion, but copies, compares
// and prints it recursively: `table show` on a 200 KB file of 100,000 nested brackets overflowed
// the stack. No attn-tune document nests past a dozen levels, so the readers of files refuse
// anything deeper than this as it is parsed.
inline constexpr int kMaxJsonDepth = 200;

// Thrown by the parsers below for a document nested deeper than kMaxJsonDepth: a json::exception,
// so every reader that refuses text that is not JSON refuses it too.
struct JsonTooDeep : nlohmann::json::exception {
  JsonTooDeep()
      : nlohmann::json::exception(
            950, ("nested deeper than " + std::to_string(kMaxJsonDepth) + " levels").c_str()) {}
};

// A json::exception's message without nlohmann's "[json.exception.parse_error.101] " prefix
// (JsonTooDeep has none).
inline std::string json_error_words(const nlohmann::json::exception& e) {
  const std::string what = e.what();
  return what.starts_with("[json.exception.") && what.find("] ") != std::string::npos
             ? what.substr(what.find("] ") + 2)
             : what;
}

// The document in `text`, refused past kMaxJsonDepth levels. Throws nlohmann::json::parse_error
// for text that is not JSON, JsonTooDeep for one nested too deep.
nlohmann::json parse_json_bounded(const std::string& text);

// The document in `text`. Throws nlohmann::json::parse_error for text that is not JSON,
// JsonTooDeep past kMaxJsonDepth levels, and DuplicateKey for an object that repeats a key.
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
