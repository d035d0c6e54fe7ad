// SHA-256 (FIPS 180-4) of a byte string or a file, as 64 lower-case hex digits: what provenance
// records about a plugin library, so a table names the exact binary whose kernels it timed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace attn {

class Sha256 {
public:
  Sha256();
  void update(const void* data, std::size_t n);
  [[nodiscard]] std::string hex(); // finishes; the object is spent afterwards

private:
  void block(const unsigned char* p);
  uint32_t h_[8];
  unsigned char buf_[64];
  std::size_t used_ = 0;
  uint64_t total_ = 0;
};

[[nodiscard]] std::string sha256_hex(const std::string& bytes);
// Throws InputError when the file cannot be read.
[[nodiscard]] std::string sha256_file(const std::string& path);

} // namespace attn
