#include "src/io/json_unique.h"

#include <gtest/gtest.h>

using attn::DuplicateKey;
using attn::parse_json_unique_keys;

namespace {

std::string duplicate_in(const std::string& text) {
  try {
    (void)parse_json_unique_keys(text);
  } catch (const DuplicateKey& e) {
    return e.path;
  }
  return "(accepted)";
}

} // namespace

TEST(JsonUnique, ParsesWhatJsonParses) {
  const std::string text =
      R"({"a": [1, {"b": 2, "c": [3, 4]}, [5, {"b": 6}]], "b": {"a": 1}, "": 0, "z": null})";
  EXPECT_EQ(parse_json_unique_keys(text), nlohmann::json::parse(text));
  // The same key in different objects is no repeat.
  EXPECT_EQ(duplicate_in(text), "(accepted)");
  EXPECT_THROW((void)parse_json_unique_keys("{\"a\": "), nlohmann::json::parse_error);
}

TEST(JsonUnique, ARepeatedKeyIsNamedByItsPath) {
  EXPECT_EQ(duplicate_in(R"({"name": "a", "name": "b"})"), "name");
  EXPECT_EQ(duplicate_in(R"({"decode": {"batch": 1, "x": 2, "batch": 2}})"), "decode.batch");
  // Array elements count from 0, past nested containers and scalars alike.
  EXPECT_EQ(duplicate_in(R"({"held_out": [{"a": 1}, [2, 3], 4, {"k": 1, "k": 1}]})"),
            "held_out[3].k");
  EXPECT_EQ(duplicate_in(R"([[{}], {"a": {"b": [{"c": 1}, {"c": 1, "c": 2}]}}])"), "[1].a.b[1].c");
}
