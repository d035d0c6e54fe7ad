// Files compiled into the binary at build time, so that it works wherever it is copied: the
// profiles (cmake/embed_profiles.cmake) and, with CUDA, the kernel sources NVRTC compiles
// (cmake/embed_kernels.cmake, listed in src/backends/cuda/embedded_kernels.h). Both generators
// emit this one type.
#pragma once
#include <cstddef>

namespace attn {

struct EmbeddedFile {
  const char* name; // profiles: the file name without ".json"; kernels: the name in kernels/
  const char* data; // the file's bytes (not NUL-terminated as far as size is concerned)
  std::size_t size;
};

namespace generated {

extern const EmbeddedFile kEmbeddedProfiles[];
extern const std::size_t kEmbeddedProfileCount;
// SHA-256 over "relative/path:sha256-of-file\n" lines of every file under kernels/,
// src/backends/cpu/ and src/backends/cuda/ (the built-in kernels, their launch and their plans),
// sorted; and those relative paths, each ended by a newline.
extern const char* const kKernelSourcesSha256;
extern const char* const kKernelSourceFiles;

} // namespace generated
} // namespace attn
