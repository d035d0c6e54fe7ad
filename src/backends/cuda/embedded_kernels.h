// The kernel sources built into the binary (cmake/embed_kernels.cmake generates the table), so
// NVRTC can compile them on a machine that has no source tree.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "src/io/embedded.h"

namespace attn::cuda {

extern const EmbeddedFile kEmbeddedKernelFiles[];
extern const int kEmbeddedKernelFileCount;

// The text of kernels/<name>; throws std::runtime_error when the build did not embed it.
[[nodiscard]] std::string embedded_kernel(const std::string& name);

// Every embedded file as (include name, text): the headers argument of an NVRTC program.
[[nodiscard]] std::vector<std::pair<std::string, std::string>> embedded_kernel_headers();

} // namespace attn::cuda
