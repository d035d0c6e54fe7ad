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

// Refuses an empty plugin path or module: the check of every option that names kernels.
[[nodiscard]] const CLI::Validator& named_kernels();

// The plugin at `path`, checked; null when `path` is empty (the built-in kernels).
[[nodiscard]] std::shared_ptr<const PluginLibrary> open_kernels(const std::string& path);

} // namespace attn::cli
