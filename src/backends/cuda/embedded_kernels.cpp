// Lookup in the generated table of embedded kernel sources (see embedded_kernels.h).
#include "src/backends/cuda/embedded_kernels.h"

#include <stdexcept>

namespace attn::cuda {

std::string embedded_kernel(const std::string& name) {
  for (int i = 0; i < kEmbeddedKernelFileCount; ++i) {
    if (name == kEmbeddedKernelFiles[i].name) {
      return {kEmbeddedKernelFiles[i].data, kEmbeddedKernelFiles[i].size};
    }
  }
  throw std::runtime_error("kernel source '" + name + "' is not embedded in this build");
}

std::vector<std::pair<std::string, std::string>> embedded_kernel_headers() {
  std::vector<std::pair<std::string, std::string>> out;
  for (int i = 0; i < kEmbeddedKernelFileCount; ++i) {
    out.emplace_back(kEmbeddedKernelFiles[i].name,
                     std::string(kEmbeddedKernelFiles[i].data, kEmbeddedKernelFiles[i].size));
  }
  return out;
}

} // namespace attn::cuda
