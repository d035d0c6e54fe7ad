#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "src/io/sha256.h"
#include "src/model/errors.h"

namespace attn {
namespace {

// FIPS 180-4 example vectors (NIST CSRC "SHA256.pdf", one block and two blocks).
TEST(Sha256, MatchesTheStandardsVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, FileEqualsBytesAcrossChunkBoundaries) {
  std::string bytes;
  for (int i = 0; i < 200000; ++i) {
    bytes += char(i * 7 + 3);
  }
  const auto path = std::filesystem::temp_directory_path() / "attn_sha256_test.bin";
  {
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
  }
  EXPECT_EQ(sha256_file(path.string()), sha256_hex(bytes));
  std::filesystem::remove(path);
  EXPECT_THROW((void)sha256_file(path.string()), InputError);
  // Incremental updates of odd sizes give the one-shot digest.
  Sha256 h;
  for (std::size_t i = 0; i < bytes.size(); i += 61) {
    h.update(bytes.data() + i, std::min<std::size_t>(61, bytes.size() - i));
  }
  EXPECT_EQ(h.hex(), sha256_hex(bytes));
}

} // namespace
} // namespace attn
