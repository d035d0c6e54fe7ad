// What a plugin declares, on its way from the function table its init fills to the identity and
// families attn-tune uses: copied out of the table as plain values in whichever process ran the
// init (the declaration probe, or the process that runs the kernels), carried as JSON, and checked
// the same way wherever it arrives.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "include/attn_tune/plugin.h"
#include "src/backends/kernel_decl.h"

namespace attn {

// What a table and a results file record about the kernels a plugin holds.
// How many of a Python module's source files a table lists by name (a package can hold
// thousands; the count is given beside them).
inline constexpr std::size_t kMaxListedSourceFiles = 64;

// "3 files: a.py, b.py, pkg/c.py", the first `shown` names of a module's `total` source files
// and "and N more" past them.
[[nodiscard]] std::string source_files_words(const std::vector<std::string>& names,
                                             std::size_t total, std::size_t shown);

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
  std::vector<std::string> python_sources; // the files library_sha256 is over, relative paths
  // {"source": "plugin", "name", "version", "abi_version", "library_sha256", "library",
  //  "device_kind"}, plus {"bridge": "python", "module", "source_files" (the first
  //  kMaxListedSourceFiles of python_sources), "source_file_count"} for Python kernels
  [[nodiscard]] nlohmann::json to_json() const;
};

// A plugin's function table as its init left it, copied without judging it. Pointers are followed
// only where the checks that guard them hold (the ABI version, the init's return code, the table's
// size, a non-null array of a sane length), so a bad table is read as far as the checks get.
struct PluginTable {
  int init_rc = 0;
  std::string init_message; // the init's message buffer
  uint32_t abi_version = 0;
  uint32_t api_size = 0;
  std::optional<std::string> name; // nullopt: a null pointer
  std::optional<std::string> version;
  int device_kind = 0;
  bool has_functions = false; // can_run, workspace_size and run are all set
  // ABI 2: the engine rule the plugin names (nullopt: none) and whether it has a prepare step.
  std::optional<std::string> engine_rule;
  bool has_prepare = false;
  int num_families = 0;
  struct Param {
    std::optional<std::string> name;
    std::vector<int> values; // empty when the plugin gives no array or no count
  };
  struct Family {
    int family = 0;
    int kv_layout = 0;
    int writes_lse = 0;
    int num_params = 0;
    std::vector<Param> params; // read only when num_params and the array agree
    // ABI 4: the family's mask of ATTN_KV_DTYPE_BIT (0 where the plugin gives no masks).
    uint32_t kv_dtypes = 0;
  };
  std::vector<Family> families; // read only when the array is there and 1 to 3 long
  // Python kernels: the bridge's {"file", "sources_sha256", "files"} for the module it imported.
  std::string python_file;
  std::string python_sources_sha256;
  std::vector<std::string> python_sources;

  [[nodiscard]] nlohmann::json to_json() const;
  // Throws nlohmann::json::exception on a document that is not one of to_json's.
  [[nodiscard]] static PluginTable from_json(const nlohmann::json& j);
};

// The size of the function table of ABI `version` (ATTN_PLUGIN_ABI_OLDEST to
// ATTN_PLUGIN_ABI_VERSION), 0 for any other.
[[nodiscard]] std::size_t plugin_api_size(uint32_t version);
// The engine rules a kernel set may name (KernelSetDecl::engine_rule): "vllm-cuda", "vllm-cpu",
// "seed".
[[nodiscard]] const std::vector<std::string>& known_engine_rules();

// Copies the table the entry point filled (`rc` its return value, `err` its message buffer).
[[nodiscard]] PluginTable read_plugin_table(int rc, const char* err, const attn_plugin_api& api);

// Every check of a declaration: throws InputError with one line saying what is wrong (another ABI
// version, a refusal, a table of another size, no name, an unknown device kind or family, a
// a decode_v2 partition that is not positive, an empty or duplicate family or parameter ...). `who` names the
// library in the messages until its name is known. Sets id's name, version, ABI version and
// device kind, and returns the declaration in the kernel contract's terms.
[[nodiscard]] KernelSetDecl check_plugin_table(const PluginTable& t, const std::string& who,
                                               PluginIdentity& id);

} // namespace attn
