// Tests of the safetensors reader and writer: round trips of every dtype, a hand-made image
// read per the format, and every kind of truncated or lying file refused with one line.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "src/io/safetensors.h"
#include "src/model/errors.h"
#include "tests/support/files.h"

using namespace attn;
namespace fs = std::filesystem;

namespace {

std::vector<std::byte> bytes_of(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()}; // no memcpy: an empty vector's data() may be null
}

// A file image with the given header text and `data_bytes` bytes of data (0, 1, 2, ...).
std::vector<std::byte> image(const std::string& header, std::size_t data_bytes,
                             uint64_t claimed_len = UINT64_MAX) {
  const uint64_t len = claimed_len == UINT64_MAX ? header.size() : claimed_len;
  std::vector<std::byte> out(8);
  for (int i = 0; i < 8; ++i) {
    out[std::size_t(i)] = std::byte((len >> (8 * i)) & 0xff);
  }
  auto h = bytes_of(header);
  out.insert(out.end(), h.begin(), h.end());
  for (std::size_t i = 0; i < data_bytes; ++i) {
    out.push_back(std::byte(i & 0xff));
  }
  return out;
}

StTensor random_tensor(StDType t, std::vector<int64_t> shape, uint32_t seed) {
  StTensor s;
  s.dtype = t;
  s.shape = std::move(shape);
  s.data.resize(std::size_t(s.numel()) * st_dtype_size(t));
  std::mt19937 gen(seed);
  for (auto& b : s.data) {
    b = std::byte(gen() & 0xff);
  }
  return s;
}

// Expects an InputError whose single-line message names the file and contains `needle`.
void expect_refused(const std::vector<std::byte>& img, const std::string& needle) {
  try {
    (void)parse_safetensors(img, "dump.safetensors");
    ADD_FAILURE() << "accepted; expected an error containing: " << needle;
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("dump.safetensors: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

} // namespace

TEST(Safetensors, RoundTripsEveryDtypeThroughAFile) {
  SafetensorsFile f;
  f.tensors["a_f32"] = random_tensor(StDType::f32, {3, 5}, 1);
  f.tensors["b_f16"] = random_tensor(StDType::f16, {2, 3, 7}, 2);
  f.tensors["c_bf16"] = random_tensor(StDType::bf16, {1, 9}, 3);
  f.tensors["d_i32"] = random_tensor(StDType::i32, {4}, 4);
  f.tensors["e_empty"] = random_tensor(StDType::f16, {0, 8}, 5);
  f.tensors["f_scalar"] = random_tensor(StDType::i32, {}, 6);
  f.metadata = {{"causal", "true"}, {"note", "spaces and \"quotes\" survive"}};
  const fs::path dir = test::fresh_dir("safetensors_roundtrip");
  const std::string path = (dir / "t.safetensors").string();
  write_safetensors(path, f);
  // Atomic write: only the target remains, no temporary next to it.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);

  const SafetensorsFile g = read_safetensors(path);
  EXPECT_EQ(g.metadata, f.metadata);
  ASSERT_EQ(g.tensors.size(), f.tensors.size());
  for (const auto& [name, t] : f.tensors) {
    const StTensor& u = g.tensors.at(name);
    EXPECT_EQ(u.dtype, t.dtype) << name;
    EXPECT_EQ(u.shape, t.shape) << name;
    EXPECT_EQ(u.data, t.data) << name;
  }
  // The header is padded so that the data starts 8-byte aligned.
  std::ifstream in(path, std::ios::binary);
  uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  EXPECT_EQ((8 + len) % 8, 0u);
  fs::remove_all(dir);
}

TEST(Safetensors, OverwritesAtomically) {
  const fs::path dir = test::fresh_dir("safetensors_overwrite");
  const std::string path = (dir / "t.safetensors").string();
  SafetensorsFile f;
  f.tensors["x"] = random_tensor(StDType::f32, {100}, 7);
  write_safetensors(path, f);
  f.tensors["x"] = random_tensor(StDType::i32, {3}, 8);
  write_safetensors(path, f);
  EXPECT_EQ(read_safetensors(path).tensors.at("x").dtype, StDType::i32);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

TEST(Safetensors, ReadsAHandMadeImage) {
  // Written by hand from the format's description, not by our writer: little-endian length,
  // JSON header (unpadded, tensors out of name order), data back to back.
  const std::string header = R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[8,12]},)"
                             R"("idx":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
                             R"("__metadata__":{"k":"v"}})";
  std::vector<std::byte> img = image(header, 0);
  const int32_t idx[2] = {-1, 123456};
  const uint16_t w[2] = {0x3c00, 0xc000}; // 1.0, -2.0
  img.resize(img.size() + 12);
  std::memcpy(img.data() + 8 + header.size(), idx, 8);
  std::memcpy(img.data() + 8 + header.size() + 8, w, 4);
  const SafetensorsFile f = parse_safetensors(img, "hand");
  EXPECT_EQ(f.metadata.at("k"), "v");
  EXPECT_EQ(to_int32(f.tensors.at("idx"), "idx"), (std::vector<int32_t>{-1, 123456}));
  const HostTensor h = to_host(f.tensors.at("w"), "w");
  EXPECT_EQ(h.dtype, DType::f16);
  EXPECT_EQ(h.get(0), 1.0f);
  EXPECT_EQ(h.get(1), -2.0f);
}

TEST(Safetensors, RejectsEveryTruncation) {
  SafetensorsFile f;
  f.tensors["a"] = random_tensor(StDType::f32, {2, 3}, 9);
  f.tensors["b"] = random_tensor(StDType::bf16, {5}, 10);
  const std::vector<std::byte> full = serialize_safetensors(f);
  ASSERT_NO_THROW((void)parse_safetensors(full, "dump.safetensors"));
  for (std::size_t n = 0; n < full.size(); ++n) {
    std::vector<std::byte> cut(full.begin(), full.begin() + std::ptrdiff_t(n));
    EXPECT_THROW((void)parse_safetensors(cut, "dump.safetensors"), InputError) << "length " << n;
  }
  expect_refused({full.begin(), full.begin() + 5}, "too short");
}

TEST(Safetensors, RejectsAHeaderLengthLargerThanTheFile) {
  const std::string header = R"({"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
  expect_refused(image(header, 4, header.size() + 5), "is larger than the");
  expect_refused(image(header, 4, UINT64_MAX - 3), "is larger than the");
}

TEST(Safetensors, RejectsOffsetsThatLie) {
  auto one = [](const std::string& offsets, const std::string& shape = "[2]") {
    return R"({"a":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}";
  };
  expect_refused(image(one("[0,8]"), 4), "reach past the 4 data bytes");
  expect_refused(image(one("[0,18446744073709551615]"), 8), "reach past");
  expect_refused(image(one("[8,0]"), 8), "end before they begin");
  expect_refused(image(one("[0,4]"), 4), "hold 4 bytes but dtype F32 and shape [2] need 8");
  expect_refused(image(one("[0,8]", "[3]"), 8), "need 12");
  expect_refused(image(one("[-4,4]"), 8), "begin is negative");
  expect_refused(image(one("[0]"), 8), "not a pair");
  expect_refused(image(one("[0,8.5]"), 8), "not an integer");
  expect_refused(image(one("[0,8]"), 12), "4 bytes after the last tensor");
  expect_refused(image(one("[4,12]"), 12), "belong to no tensor");
}

TEST(Safetensors, RejectsOverlappingTensors) {
  const std::string h = R"({"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"I32","shape":[2],"data_offsets":[4,12]}})";
  expect_refused(image(h, 12), "tensors 'a' and 'b' overlap");
  const std::string same = R"({"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  expect_refused(image(same, 8), "overlap");
}

TEST(Safetensors, RejectsBadShapes) {
  auto with_shape = [](const std::string& shape) {
    return R"({"a":{"dtype":"F16","shape":)" + shape + R"(,"data_offsets":[0,0]}})";
  };
  expect_refused(image(with_shape("[2,-1]"), 0), "shape[1] is negative");
  expect_refused(image(with_shape("[\"2\"]"), 0), "shape[0] is not an integer");
  expect_refused(image(with_shape("3"), 0), "shape that is not an array");
  // 2^40 * 2^40 elements: the element count must not wrap around to something small.
  expect_refused(image(with_shape("[1099511627776,1099511627776]"), 0), "too many elements");
  expect_refused(image(with_shape("[9223372036854775808]"), 0), "too many elements");
}

TEST(Safetensors, RejectsInvalidJson) {
  expect_refused(image(R"({"a": {"dtype": "F32", )", 0), "not valid JSON");
  expect_refused(image("", 0), "not valid JSON");
  expect_refused(image("[1, 2]", 0), "not a JSON object");
  expect_refused(image(R"({"a": 3})", 0), "tensor 'a' is not described by an object");
  expect_refused(image(R"({"a": {"dtype": "F32", "shape": [0]}})", 0), "has no data_offsets");
  expect_refused(image(R"({"__metadata__": {"x": 1}})", 0), "'x' is not a string");
  expect_refused(image(R"({"__metadata__": ["x"]})", 0), "__metadata__ is not an object");
  // A tensor named twice: JSON keeps the last, so the first one's bytes would be read as nobody's.
  expect_refused(image(R"({"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},)"
                       R"("a":{"dtype":"I32","shape":[1],"data_offsets":[4,8]}})",
                       8),
                 "the header: a: the key appears twice in its object");
}

TEST(Safetensors, RejectsUnsupportedDtypesByName) {
  for (const char* dt : {"F8_E4M3FNUZ", "f32", "Q4_K"}) {
    const std::string h =
        std::string(R"({"kv":{"dtype":")") + dt + R"(","shape":[1],"data_offsets":[0,8]}})";
    expect_refused(image(h, 8), std::string("tensor 'kv' has unsupported dtype ") + dt);
  }
}

// Safetensors dtypes attn-tune does not read (an engine's extra int64 tensor) are skipped, their
// size and place checked like any tensor's; a reader that needs one refuses it (replay).
TEST(Safetensors, SkipsTensorsOfDtypesItDoesNotRead) {
  for (const char* dt : {"F64", "I64", "U64"}) {
    const std::string h =
        std::string(R"({"kv":{"dtype":")") + dt + R"(","shape":[1],"data_offsets":[0,8]}})";
    const SafetensorsFile f = parse_safetensors(image(h, 8), "t");
    EXPECT_TRUE(f.tensors.empty()) << dt;
    ASSERT_EQ(f.skipped.count("kv"), 1u) << dt;
    EXPECT_EQ(f.skipped.at("kv"), dt);
  }
  for (const char* dt : {"I8", "BOOL"}) { // one byte each: 8 bytes are not [1]
    const std::string h =
        std::string(R"({"kv":{"dtype":")") + dt + R"(","shape":[1],"data_offsets":[0,8]}})";
    expect_refused(image(h, 8), "hold 8 bytes but dtype " + std::string(dt));
  }
}

TEST(Safetensors, MissingFileIsAnInputError) {
  try {
    (void)read_safetensors("/nonexistent/dir/x.safetensors");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/x.safetensors: cannot open"),
              std::string::npos)
        << e.what();
  }
  SafetensorsFile f;
  EXPECT_THROW(write_safetensors("/nonexistent/dir/x.safetensors", f), InputError);
}

TEST(Safetensors, WriterRefusesInconsistentTensors) {
  SafetensorsFile f;
  f.tensors["a"] = random_tensor(StDType::f32, {2}, 1);
  f.tensors["a"].data.pop_back();
  EXPECT_THROW((void)serialize_safetensors(f), InputError);
}

TEST(Safetensors, ConversionsCheckDtypes) {
  const StTensor i = random_tensor(StDType::i32, {2}, 1);
  const StTensor h = random_tensor(StDType::bf16, {2}, 2);
  EXPECT_THROW((void)to_host(i, "query"), InputError);
  EXPECT_THROW((void)to_int32(h, "block_tables"), InputError);
  EXPECT_THROW((void)to_float32(h, "lse"), InputError);
  EXPECT_EQ(to_host(h, "x").dtype, DType::bf16);
  EXPECT_EQ(to_st(to_host(h, "x")).data, h.data);
}
