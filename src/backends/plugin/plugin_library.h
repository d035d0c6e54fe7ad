// A kernel plugin (include/attn_tune/plugin.h) opened and checked: its identity for provenance,
// its families with their configuration spaces and layouts, and C++ calls into it that turn the
// ABI's return codes and message buffers into reasons and exceptions.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "include/attn_tune/plugin.h"
#include "src/backends/kernel_decl.h"
#include "src/model/kernel_config.h"
#include "src/model/kv_layout.h"
#include "src/model/problem.h"

namespace attn {

// What a table and a results file record about the kernels a plugin holds.
struct PluginIdentity {
  std::string path;    // as given on the command line
  std::string name;    // the plugin's own name
  std::string version; // the plugin's own version string
  uint32_t abi_version = 0;
  std::string library_sha256;
  attn_device_kind device_kind = ATTN_DEVICE_HOST;
  // Kernels loaded through the Python bridge (path "python:MODULE[:FACTORY]"): the module spec
  // and its source file or package folder; library_sha256 is then the SHA-256 of its sources.
  std::string python_module;
  std::string python_file;
  // {"source": "plugin", "name", "version", "abi_version", "library_sha256", "library",
  //  "device_kind"}, plus {"bridge": "python", "module"} for Python kernels
  [[nodiscard]] nlohmann::json to_json() const;
};


// A plugin's failure inside run or workspace_size (its return code and message): the
// configuration's error, not the command's.
class PluginError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class PluginLibrary {
public:
  // dlopens `path`, calls its entry point and checks every declaration; throws InputError with
  // one line saying what is wrong (not a file, no entry point, another ABI version, a decode_v2
  // without "partition", an empty or duplicate family, a parameter without values ...).
  // "python:MODULE[:FACTORY]" loads the Python bridge (python_bridge_path) with that module.
  [[nodiscard]] static std::shared_ptr<PluginLibrary> open(const std::string& path);
  ~PluginLibrary();
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  [[nodiscard]] const PluginIdentity& identity() const { return id_; }
  // What the plugin declares, in the kernel contract's terms (name, memory, families).
  [[nodiscard]] const KernelSetDecl& declaration() const { return decl_; }
  [[nodiscard]] const std::vector<FamilyDecl>& families() const { return decl_.families; }
  // The family as the plugin declares it; nullptr when the plugin does not declare `f`.
  [[nodiscard]] const FamilyDecl* family(Family f) const { return decl_.family(f); }

  // Every combination of the family's parameter values; empty when the plugin does not declare `f`.
  [[nodiscard]] std::vector<KernelConfig> config_space(Family f) const;
  // Why `cfg` cannot be run on a call of this shape: the family or a parameter is not declared,
  // a value is missing, or the plugin's own can_run refuses (its reason, prefixed by nothing).
  [[nodiscard]] std::optional<std::string> can_run(const KernelConfig& cfg,
                                                   const attn_call& shape) const;
  // Throws PluginError with the plugin's message.
  [[nodiscard]] uint64_t workspace_size(const KernelConfig& cfg, const attn_call& shape) const;
  void run(const KernelConfig& cfg, const attn_call& call, void* workspace, uint64_t bytes,
           void* stream) const;

private:
  PluginLibrary() = default;
  // Calls the entry point of the loaded library and checks what it declares.
  void initialise(const std::string& who);
  // The family's parameter values for `cfg` in declaration order, or why they cannot be made.
  struct ConfigView {
    std::vector<const char*> names;
    std::vector<int> values;
    attn_config c{};
  };
  [[nodiscard]] std::optional<std::string> view(const KernelConfig& cfg, ConfigView& out) const;

  void* handle_ = nullptr;
  attn_plugin_api api_{};
  PluginIdentity id_;
  KernelSetDecl decl_;
};

// Whether `spec` names Python kernels ("python:...").
[[nodiscard]] bool is_python_kernels(const std::string& spec);
// The Python bridge library: $ATTN_TUNE_PYTHON_BRIDGE, else libattn_tune_python.so next to the
// running executable, else where this build put it; "" when there is none (built without
// Python's development files).
[[nodiscard]] std::string python_bridge_path();

// The shape fields of a call (every pointer null) for `pr` in `layout`, as can_run and
// workspace_size see it; `threads` is the host plugins' thread count.
[[nodiscard]] attn_call plugin_call_shape(const Problem& pr, Family f, KvLayout layout,
                                          int threads);

} // namespace attn
