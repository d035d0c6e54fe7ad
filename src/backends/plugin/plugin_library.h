// A kernel plugin (include/attn_tune/plugin.h) opened and checked: its identity for provenance,
// its families with their configuration spaces and layouts, and C++ calls into it that turn the
// ABI's return codes and message buffers into reasons and exceptions. The plugin's own code (its
// init, a Python module's import) never runs in the process that opens it: a short-lived child
// reads the declaration, and the library is loaded for real by the first call into it, in the
// process that makes that call (a worker, or this one under --in-process).
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "include/attn_tune/plugin.h"
#include "src/backends/kernel_decl.h"
#include "src/backends/plugin/plugin_declaration.h"
#include "src/model/kernel_config.h"
#include "src/model/kv_layout.h"
#include "src/model/problem.h"

namespace attn {

// A plugin's failure inside run or workspace_size (its return code and message): the
// configuration's error, not the command's.
class PluginError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class PluginLibrary {
public:
  // Reads what `path` declares and checks it; throws InputError with one line saying what is
  // wrong (not a file, no entry point, another ABI version, a decode_v2 partition <= 0, an
  // empty or duplicate family, a parameter without values ...; an init that crashes, exits or
  // does not answer within plugin_probe_timeout_s()). "python:MODULE[:FACTORY]" loads the Python
  // bridge (python_bridge_path) with that module. The declaration comes from a child process
  // (the declaration probe), once per path and process: a fork of this process that opens the
  // same path again (a worker making its backend) reuses it.
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

  // Loads the library into this process unless it (or the process this one was forked from)
  // already has: dlopen and the plugin's init (for Python kernels: start Python and import the
  // module), thread-safe. Throws InputError when that fails or when the plugin now declares
  // something else than the probe read; a failure is thrown again on every later call. The calls
  // below load on their own; a backend loads when it is made, so that a failure ends the command
  // instead of failing each run.
  void load() const;
  // Why `cfg` cannot be run on a call of this shape: the family or a parameter is not declared,
  // a value is missing, or the plugin's own can_run refuses (its reason, prefixed by nothing).
  [[nodiscard]] std::optional<std::string> can_run(const KernelConfig& cfg,
                                                   const attn_call& shape) const;
  // Throws PluginError with the plugin's message.
  [[nodiscard]] uint64_t workspace_size(const KernelConfig& cfg, const attn_call& shape) const;
  void run(const KernelConfig& cfg, const attn_call& call, void* workspace, uint64_t bytes,
           void* stream) const;
  // Whether the plugin has the untimed prepare step (ABI 2; PluginPrepared calls it).
  [[nodiscard]] bool has_prepare() const { return has_prepare_; }

private:
  friend class PluginPrepared;
  PluginLibrary() = default;
  // The family's parameter values for `cfg` in declaration order, or why they cannot be made.
  struct ConfigView {
    std::vector<const char*> names;
    std::vector<int> values;
    attn_config c{};
  };
  [[nodiscard]] std::optional<std::string> view(const KernelConfig& cfg, ConfigView& out) const;
  // "plugin PATH", or the "python:..." spec: names the library before its own name is known.
  [[nodiscard]] std::string who() const;

  PluginIdentity id_;
  KernelSetDecl decl_;
  nlohmann::json probed_; // the table the probe read (PluginTable::to_json), for load to compare
  bool has_prepare_ = false;

  // Set once by load(), under load_mutex_.
  mutable std::mutex load_mutex_;
  mutable std::atomic<bool> loaded_{false};
  mutable std::string load_error_;
  mutable attn_plugin_api api_{};
  mutable pid_t loaded_by_ = 0; // the process that ran the init: the one that may call destroy
};

// What a plugin's prepare step made for one prepared run (ABI 2), released when this goes: its
// handle (passed to every run as attn_call::prepared) and the memory it laid out, which the run's
// timing evicts from the caches before each rep like the run's own buffers. Without a prepare step
// it holds nothing.
class PluginPrepared {
public:
  // Calls the plugin's prepare on `call` (every pointer set) with the run's workspace; throws
  // PluginError with the plugin's message.
  PluginPrepared(std::shared_ptr<const PluginLibrary> lib, KernelConfig cfg, const attn_call& call,
                 void* workspace, uint64_t bytes, void* stream);
  PluginPrepared(const PluginPrepared&) = delete;
  PluginPrepared& operator=(const PluginPrepared&) = delete;
  ~PluginPrepared();

  [[nodiscard]] void* handle() const { return made_ ? raw_.handle : nullptr; }
  [[nodiscard]] std::vector<attn_memory_range> ranges() const;
  [[nodiscard]] uint64_t bytes() const; // of every range together

private:
  void release() noexcept;

  std::shared_ptr<const PluginLibrary> lib_;
  KernelConfig cfg_;
  attn_prepared raw_{};
  bool made_ = false;
};

// Whether `spec` names Python kernels ("python:...").
[[nodiscard]] bool is_python_kernels(const std::string& spec);
// The Python bridge library: $ATTN_TUNE_PYTHON_BRIDGE, else libattn_tune_python.so next to the
// running executable, else where this build put it; "" when there is none (built without
// Python's development files).
[[nodiscard]] std::string python_bridge_path();
// How long the declaration probe may take: $ATTN_TUNE_PLUGIN_PROBE_TIMEOUT seconds, else 300;
// throws InputError when the variable is not a positive number.
[[nodiscard]] double plugin_probe_timeout_s();

// The arrays a call carries on the host, kept alive by whoever holds the call: every sequence's
// query and key lengths (ABI 3's seq_q_lens and seq_k_lens, which the call points into) and an
// fp8 cache's scales (ABI 4), num_kv_scales each, for the run to place in the plugin's memory.
struct PluginHostArrays {
  std::vector<int32_t> q;
  std::vector<int32_t> k;
  std::vector<float> k_scale;
  std::vector<float> v_scale;
};

// The shape fields of a call for `pr` in `layout`, as can_run and workspace_size see it: every
// pointer into the plugin's memory null (the scales too), the sequences' lengths and the scales
// in `arrays` (which must outlive the call); `threads` is the host plugins' thread count. The
// scales are one per tensor when both of the problem's are, else one per KV head.
[[nodiscard]] attn_call plugin_call_shape(const Problem& pr, Family f, KvLayout layout,
                                          int threads, PluginHostArrays& arrays);

} // namespace attn
