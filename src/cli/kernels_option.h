// --kernels PATH.so, shared by sweep, verify, replay and `plugin check`: the plugin is opened in
// the command's own process first, so a library that is not a plugin, or one built for another
// ABI, is one line and exit 2 before any worker starts; the workers open it again for themselves.
#pragma once
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "src/backends/plugin/plugin_library.h"
#include "src/backends/registry.h"

namespace attn::cli {

void add_kernels_option(CLI::App* sub, std::string& path);

// The plugin at `path`, checked; null when `path` is empty (the built-in kernels).
[[nodiscard]] std::shared_ptr<const PluginLibrary> open_kernels(const std::string& path);

// The device a command runs on: `given`, else the plugin's kind of device (the CPU for
// host-memory plugins, GPU 0 for CUDA ones), else default_device. `said` is empty when given.
[[nodiscard]] DeviceChoice choose_device(const std::string& given, const PluginLibrary* lib,
                                         const BackendOptions& bo);

// "plugin NAME VERSION (PATH)" or "the built-in kernels", for progress lines.
[[nodiscard]] std::string kernels_phrase(const PluginLibrary* lib);

} // namespace attn::cli
