// Reading a JSON document at the door: every field through a getter that checks its type and its
// range, so that a consumer further in never meets a wrong type, a zero it divides by, a NaN or a
// number that would wrap. A bad field is one InputError (exit 2) that names where the document
// came from (file and line), the field's path and what was expected:
//   "out/results.jsonl: line 7: workload.num_kv_heads: expected an integer from 1 to 65536, got 0"
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "src/model/errors.h"

namespace attn {

class JsonDoor {
public:
  // `where`: the document, "FILE" or "FILE: line N" ("" when the caller adds it).
  explicit JsonDoor(std::string where = {}) : where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    std::string s = where_;
    if (!path.empty()) {
      s += (s.empty() ? "" : ": ") + path;
    }
    throw InputError((s.empty() ? "" : s + ": ") + what);
  }

  // A value as a short text for an error (long strings and containers cut).
  [[nodiscard]] static std::string shown(const nlohmann::json& v) {
    std::string s = v.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
    return s.size() > 40 ? s.substr(0, 37) + "..." : s;
  }
  [[nodiscard]] static std::string sub(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

  const nlohmann::json& object(const nlohmann::json& v, const std::string& path) const {
    if (!v.is_object()) {
      fail(path, "expected an object, got " + shown(v));
    }
    return v;
  }
  const nlohmann::json& field(const nlohmann::json& obj, const std::string& path,
                              const std::string& key) const {
    object(obj, path);
    const auto it = obj.find(key);
    if (it == obj.end()) {
      fail(sub(path, key), "missing");
    }
    return *it;
  }

  // An integer in [lo, hi]; floats, strings and out-of-range values are refused (never wrapped).
  int64_t integer(const nlohmann::json& v, const std::string& path, int64_t lo, int64_t hi) const {
    const bool fits = v.is_number_integer() &&
                      (v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT64_MAX) : true);
    if (!fits || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
      const bool any = lo <= INT32_MIN && hi >= INT32_MAX;
      fail(path, (any ? std::string("expected an integer")
                      : "expected an integer from " + std::to_string(lo) + " to " +
                            std::to_string(hi)) +
                     ", got " + shown(v));
    }
    return v.get<int64_t>();
  }
  int64_t integer(const nlohmann::json& obj, const std::string& path, const std::string& key,
                  int64_t lo, int64_t hi) const {
    return integer(field(obj, path, key), sub(path, key), lo, hi);
  }
  int64_t integer_or(const nlohmann::json& obj, const std::string& path, const std::string& key,
                     int64_t lo, int64_t hi, int64_t fallback) const {
    return object(obj, path).contains(key) ? integer(obj, path, key, lo, hi) : fallback;
  }
  // An unsigned 64-bit integer (seeds).
  uint64_t unsigned_integer(const nlohmann::json& obj, const std::string& path,
                            const std::string& key, uint64_t fallback) const {
    if (!object(obj, path).contains(key)) {
      return fallback;
    }
    const nlohmann::json& v = obj[key];
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
      fail(sub(path, key), "expected an integer >= 0, got " + shown(v));
    }
    return v.get<uint64_t>();
  }

  // A finite number in [lo, hi] (NaN, infinities and 1e999 are refused).
  double number(const nlohmann::json& v, const std::string& path, double lo, double hi) const {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < lo ||
        v.get<double>() > hi) {
      const std::string range = lo <= -1e300 && hi >= 1e300 ? ""
                                : hi >= 1e300 ? " >= " + shown(nlohmann::json(lo))
                                              : " from " + shown(nlohmann::json(lo)) + " to " +
                                                    shown(nlohmann::json(hi));
      fail(path, "expected a finite number" + range + ", got " + shown(v));
    }
    return v.get<double>();
  }
  double number(const nlohmann::json& obj, const std::string& path, const std::string& key,
                double lo, double hi) const {
    return number(field(obj, path, key), sub(path, key), lo, hi);
  }
  double number_or(const nlohmann::json& obj, const std::string& path, const std::string& key,
                   double lo, double hi, double fallback) const {
    return object(obj, path).contains(key) ? number(obj, path, key, lo, hi) : fallback;
  }

  std::string text(const nlohmann::json& v, const std::string& path) const {
    if (!v.is_string()) {
      fail(path, "expected a string, got " + shown(v));
    }
    return v.get<std::string>();
  }
  std::string text(const nlohmann::json& obj, const std::string& path,
                   const std::string& key) const {
    return text(field(obj, path, key), sub(path, key));
  }
  std::string text_or(const nlohmann::json& obj, const std::string& path, const std::string& key,
                      const std::string& fallback) const {
    return object(obj, path).contains(key) ? text(obj, path, key) : fallback;
  }

  bool boolean(const nlohmann::json& obj, const std::string& path, const std::string& key) const {
    const nlohmann::json& v = field(obj, path, key);
    if (!v.is_boolean()) {
      fail(sub(path, key), "expected true or false, got " + shown(v));
    }
    return v.get<bool>();
  }
  bool boolean_or(const nlohmann::json& obj, const std::string& path, const std::string& key,
                  bool fallback) const {
    return object(obj, path).contains(key) ? boolean(obj, path, key) : fallback;
  }

  const nlohmann::json& array(const nlohmann::json& obj, const std::string& path,
                              const std::string& key) const {
    const nlohmann::json& v = field(obj, path, key);
    if (!v.is_array()) {
      fail(sub(path, key), "expected a list, got " + shown(v));
    }
    return v;
  }

private:
  std::string where_;
};

} // namespace attn
