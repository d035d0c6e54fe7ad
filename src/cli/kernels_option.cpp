#include "src/cli/kernels_option.h"

namespace attn::cli {

const CLI::Validator& named_kernels() {
  // An empty value is a usage error, not "the built-in kernels": `--kernels "$PLUGIN"` with the
  // variable unset would otherwise pass a CI gate without running the plugin.
  static const CLI::Validator v(
      [](const std::string& s) {
        return s.empty() ? std::string("is empty: name a plugin library (PATH.so) or "
                                       "python:MODULE; leave the option out for the built-in "
                                       "kernels")
                         : std::string();
      },
      "", "named kernels");
  return v;
}

void add_kernels_option(CLI::App* sub, std::string& path) {
  sub->add_option("--kernels", path,
                  "A kernel plugin library (include/attn_tune/plugin.h, docs/plugins.md), or "
                  "python:MODULE[:FACTORY] for kernels written in Python "
                  "(docs/python-kernels.md), run instead of the built-in ones")
      ->check(named_kernels());
}

std::shared_ptr<const PluginLibrary> open_kernels(const std::string& path) {
  if (path.empty()) {
    return nullptr;
  }
  return PluginLibrary::open(path);
}

} // namespace attn::cli
