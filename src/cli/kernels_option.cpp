#include "src/cli/kernels_option.h"

namespace attn::cli {

void add_kernels_option(CLI::App* sub, std::string& path) {
  sub->add_option("--kernels", path,
                  "A kernel plugin library (include/attn_tune/plugin.h, docs/plugins.md), or "
                  "python:MODULE[:FACTORY] for kernels written in Python "
                  "(docs/python-kernels.md), run instead of the built-in ones");
}

std::shared_ptr<const PluginLibrary> open_kernels(const std::string& path) {
  if (path.empty()) {
    return nullptr;
  }
  return PluginLibrary::open(path);
}

} // namespace attn::cli
