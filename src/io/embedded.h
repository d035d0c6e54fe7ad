// Data compiled into the binary at build time by cmake/embed_profiles.cmake: the profiles/*.json
// files (so `--profile NAME` works wherever the binary goes) and the hash of kernels/ sources.
#pragma once
#include <cstddef>

namespace attn::generated {

struct EmbeddedFile {
  const char* name; // file name without ".json"
  const unsigned char* data;
  std::size_t size;
};

extern const EmbeddedFile kEmbeddedProfiles[];
extern const std::size_t kEmbeddedProfileCount;
// SHA-256 over "relative/path:sha256-of-file\n" lines of every file under kernels/, sorted.
extern const char* const kKernelSourcesSha256;

} // namespace attn::generated
