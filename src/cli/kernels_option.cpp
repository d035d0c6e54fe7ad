#include "src/cli/kernels_option.h"

#include "src/backends/plugin/plugin_backend.h"

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

DeviceChoice choose_device(const std::string& given, const PluginLibrary* lib,
                           const BackendOptions& bo) {
  if (!given.empty()) {
    return {given, ""};
  }
  if (lib != nullptr) {
    const std::string spec = default_plugin_device(*lib);
    return {spec, "no --device given: plugin " + lib->identity().name + " runs on " +
                      (spec == "cpu" ? std::string("host memory: using the CPU")
                                     : std::string("CUDA devices: using GPU 0"))};
  }
  return default_device(bo);
}

std::string kernels_phrase(const PluginLibrary* lib) {
  if (lib == nullptr) {
    return "the built-in kernels";
  }
  const PluginIdentity& id = lib->identity();
  return "plugin " + id.name + (id.version.empty() ? "" : " " + id.version) + " (" + id.path + ")";
}

} // namespace attn::cli
