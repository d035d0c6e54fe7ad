#include "src/io/teardown.h"
#include "src/backends/plugin/plugin_library.h"

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>

#include "src/backends/deadline.h"
#include "src/io/child_process.h"
#include "src/io/sha256.h"
#include "src/model/errors.h"

namespace attn {

namespace {

constexpr std::size_t kMessageBytes = 1024;

attn_family abi_family(Family f) {
  return f == Family::decode_v1   ? ATTN_FAMILY_DECODE_V1
         : f == Family::decode_v2 ? ATTN_FAMILY_DECODE_V2
                                  : ATTN_FAMILY_PREFILL;
}

std::string message_or(const char* buf, const char* fallback) {
  return buf[0] != '\0' ? std::string(buf) : std::string(fallback);
}

} // namespace

bool is_python_kernels(const std::string& spec) { return spec.rfind("python:", 0) == 0; }

std::string python_bridge_path() {
  constexpr const char* kName = "libattn_tune_python.so";
  if (const char* env = std::getenv("ATTN_TUNE_PYTHON_BRIDGE"); env != nullptr && *env != '\0') {
    return env;
  }
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec && std::filesystem::is_regular_file(exe.parent_path() / kName, ec)) {
    return (exe.parent_path() / kName).string();
  }
#ifdef ATTN_PYTHON_BRIDGE_BUILD_PATH
  if (std::filesystem::is_regular_file(ATTN_PYTHON_BRIDGE_BUILD_PATH, ec)) {
    return ATTN_PYTHON_BRIDGE_BUILD_PATH;
  }
#endif
  return "";
}

namespace {

// attn-tune's own python/ folder (attn_tune_torch), which the bridge puts last on sys.path.
std::string attn_python_dir() {
  if (const char* env = std::getenv("ATTN_TUNE_PYTHON_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
#ifdef ATTN_PYTHON_DIR
  return ATTN_PYTHON_DIR;
#else
  return "";
#endif
}

} // namespace

double plugin_probe_timeout_s() {
  // A Python module importing torch and a CUDA stack takes seconds, not minutes.
  return seconds_from_env("ATTN_TUNE_PLUGIN_PROBE_TIMEOUT", 300.0);
}

namespace {

// The Python bridge library, or InputError saying that this build has none.
std::string bridge_or_refuse(const std::string& who) {
  std::string bridge = python_bridge_path();
  if (bridge.empty()) {
    throw InputError(who + ": this attn-tune was built without its Python bridge (CMake found "
                           "no Python 3 development files: install python3-dev and rebuild, "
                           "or point ATTN_TUNE_PYTHON_BRIDGE at libattn_tune_python.so)");
  }
  return bridge;
}

// What the plugin's init gives the process that calls it: the function table, and the table
// copied out for the checks.
struct InitResult {
  attn_plugin_api api{};
  PluginTable table;
};

// dlopens the library `path` names (a plugin file, or the Python bridge with the module chosen)
// and calls its entry point: the plugin's own code runs in this process from here on. Throws
// InputError for what stops before there is a table (the library cannot be loaded, exports no
// entry point, or the bridge refuses the module spec). The library stays mapped: a plugin
// linked with the CUDA runtime registers its kernels at load time and unregisters them from exit
// handlers, which must still find its code.
InitResult load_and_init(const std::string& path, const std::string& who) {
  void* handle = nullptr;
  using Identity = const char* (*)();
  Identity identity = nullptr;
  if (is_python_kernels(path)) {
    const std::string bridge = bridge_or_refuse(who);
    // Never unloaded: the interpreter it starts lives as long as the process.
    handle = ::dlopen(bridge.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (handle == nullptr) {
      const char* why = ::dlerror();
      throw InputError(who + ": cannot load the Python bridge " + bridge + ": " +
                       (why ? why : "unknown dlopen error"));
    }
    using Select = int (*)(const char*, const char*, char*, size_t);
    auto select = reinterpret_cast<Select>(::dlsym(handle, "attn_tune_python_bridge_select"));
    identity = reinterpret_cast<Identity>(::dlsym(handle, "attn_tune_python_bridge_identity"));
    if (select == nullptr || identity == nullptr) {
      throw InputError(who + ": " + bridge + " is not attn-tune's Python bridge");
    }
    char err[kMessageBytes] = {};
    if (select(path.substr(7).c_str(), attn_python_dir().c_str(), err, sizeof err) != 0) {
      err[sizeof err - 1] = '\0';
      throw InputError(who + ": " + message_or(err, "refused"));
    }
  } else {
    // dlopen searches the library path for a bare name; a path with a slash is taken as it is.
    const std::string load_path = path.find('/') == std::string::npos ? "./" + path : path;
    handle = ::dlopen(load_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = ::dlerror();
      throw InputError(who + ": cannot load it: " + (why ? why : "unknown dlopen error"));
    }
  }
  void* sym = ::dlsym(handle, ATTN_PLUGIN_ENTRY_NAME);
  if (sym == nullptr) {
    throw InputError(who + " exports no " + ATTN_PLUGIN_ENTRY_NAME +
                     "(): it is not an attn-tune kernel plugin (docs/plugins.md)");
  }
  auto init = reinterpret_cast<attn_plugin_init_fn>(sym);
  InitResult out;
  char err[kMessageBytes] = {};
  int rc = init(ATTN_PLUGIN_ABI_VERSION, &out.api, sizeof out.api, err, sizeof err);
  err[sizeof err - 1] = '\0';
  // A plugin built for an older ABI this host still speaks refuses the current one: offer it its
  // own, with a zeroed table of that version's size (the fields after it stay zero: no prepare
  // step, no engine rule).
  const uint32_t answered = out.api.abi_version;
  if (rc != 0 && answered != ATTN_PLUGIN_ABI_VERSION && plugin_api_size(answered) != 0) {
    out.api = attn_plugin_api{};
    std::fill(std::begin(err), std::end(err), '\0');
    rc = init(answered, &out.api, plugin_api_size(answered), err, sizeof err);
    err[sizeof err - 1] = '\0';
  }
  out.table = read_plugin_table(rc, err, out.api);
  if (identity != nullptr && rc == 0) {
    const nlohmann::json id =
        nlohmann::json::parse(identity(), nullptr, /*allow_exceptions=*/false);
    if (id.is_object()) {
      out.table.python_file = id.value("file", "");
      out.table.python_sources_sha256 = id.value("sources_sha256", "");
      if (const auto files = id.find("files"); files != id.end() && files->is_array()) {
        for (const auto& f : *files) {
          if (f.is_string()) {
            out.table.python_sources.push_back(f.get<std::string>());
          }
        }
      }
    }
  }
  return out;
}

// The declaration probe: a child process loads the library, calls its init and sends back the
// table ({"table": ...}) or the one-line reason it could not ({"error": ...}); this process runs
// none of the plugin's code, so an init that crashes, exits, hangs or initialises a CUDA context
// (which a fork does not inherit in working order) leaves it as it was.
nlohmann::json probe_table(const std::string& path, const std::string& who) {
  const double limit = plugin_probe_timeout_s();
  const ChildOutcome out = run_in_child(
      [&] {
        nlohmann::json reply;
        try {
          reply["table"] = load_and_init(path, who).table.to_json();
        } catch (const std::exception& e) {
          reply["error"] = e.what();
        }
        return reply.dump();
      },
      limit);
  const std::string probe = who + ": the process that loads it to read its declaration";
  if (out.timed_out) {
    char s[32];
    std::snprintf(s, sizeof s, "%g", limit);
    throw InputError(probe + " had not answered after " + s +
                     " s and was stopped (does its init or import hang? "
                     "ATTN_TUNE_PLUGIN_PROBE_TIMEOUT sets the limit in seconds)");
  }
  if (out.text.empty()) {
    throw InputError(
        probe + " " + (WIFSIGNALED(out.status) ? "was " : "") + describe_wait_status(out.status) +
        " before it declared anything" +
        (WIFEXITED(out.status) ? " (does its init, or code it loads, call exit?)" : ""));
  }
  const nlohmann::json reply = nlohmann::json::parse(out.text, nullptr, /*allow_exceptions=*/false);
  if (reply.is_object() && reply.contains("error") && reply["error"].is_string()) {
    throw InputError(reply["error"].get<std::string>());
  }
  try {
    (void)PluginTable::from_json(reply.at("table"));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(probe + " sent what cannot be read (" + e.what() + "); it " +
                     describe_wait_status(out.status));
  }
  return reply["table"];
}

// The Python specs (MODULE[:FACTORY]) whose declaration a probe has read, one per line: the bridge
// (bridge.py) prints a declaration's warnings only where its spec is not listed.
constexpr const char* kPythonDeclaredEnv = "ATTN_TUNE_PYTHON_DECLARED";

// The probes' tables by path, kept for this process and the forks it makes: a worker that opens
// the library again (make_backend) takes its parent's answer instead of probing once more. The
// one process-wide state of this file, for that reason.
nlohmann::json probed_table(const std::string& path, const std::string& who) {
  static std::mutex mutex;
  static std::map<std::string, nlohmann::json> tables;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = tables.find(path); it != tables.end()) {
      return it->second;
    }
  }
  nlohmann::json table = probe_table(path, who); // not under the lock: a probe takes seconds
  if (is_python_kernels(path)) {
    // The probe printed the module's declaration warnings (a misspelt key); the worker that loads
    // it again, a fork of this process, finds its spec here and does not print them twice.
    const char* said = std::getenv(kPythonDeclaredEnv);
    const std::string specs = said != nullptr ? std::string(said) + "\n" : std::string();
    ::setenv(kPythonDeclaredEnv, (specs + path.substr(7)).c_str(), 1);
  }
  const std::lock_guard<std::mutex> lock(mutex);
  return tables.emplace(path, std::move(table)).first->second;
}

// What differs between two tables that both pass the checks, in words ("its version, its
// families"); "" when they declare the same (the init's message may differ).
std::string what_changed(const nlohmann::json& before, const nlohmann::json& now) {
  static const std::pair<const char*, const char*> kParts[] = {
      {"name", "its name"},
      {"version", "its version"},
      {"device_kind", "its device kind"},
      {"engine_rule", "its engine rule"},
      {"has_prepare", "whether it has a prepare step"},
      {"families", "its families"},
      {"python_file", "the module's file"},
      {"python_sources_sha256", "the module's sources"}};
  std::string out;
  for (const auto& [key, words] : kParts) {
    if (before.value(key, nlohmann::json()) != now.value(key, nlohmann::json())) {
      out += (out.empty() ? "" : ", ") + std::string(words);
    }
  }
  return out;
}

} // namespace

std::string PluginLibrary::who() const {
  return is_python_kernels(id_.path) ? id_.path : "plugin " + id_.path;
}

std::shared_ptr<PluginLibrary> PluginLibrary::open(const std::string& path) {
  std::shared_ptr<PluginLibrary> lib(new PluginLibrary());
  lib->id_.path = path;
  const std::string who = lib->who();
  if (is_python_kernels(path)) {
    (void)bridge_or_refuse(who);
    lib->id_.python_module = path.substr(7);
  } else {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
      throw InputError(who + (std::filesystem::exists(path, ec)
                                  ? ": not a regular file (a shared library is expected)"
                                  : ": no such file"));
    }
    lib->id_.library_sha256 = sha256_file(path);
  }
  lib->probed_ = probed_table(path, who);
  const PluginTable t = PluginTable::from_json(lib->probed_);
  lib->decl_ = check_plugin_table(t, who, lib->id_);
  lib->has_prepare_ = t.has_prepare;
  if (!lib->id_.python_module.empty()) {
    lib->id_.python_file = t.python_file;
    lib->id_.python_sources = t.python_sources;
    lib->id_.library_sha256 = t.python_sources_sha256;
  }
  return lib;
}

void PluginLibrary::load() const {
  if (loaded_.load(std::memory_order_acquire)) {
    return;
  }
  const std::lock_guard<std::mutex> lock(load_mutex_);
  if (loaded_.load(std::memory_order_relaxed)) {
    return;
  }
  if (!load_error_.empty()) {
    throw InputError(load_error_);
  }
  try {
    const InitResult now = load_and_init(id_.path, who());
    PluginIdentity again = id_;
    (void)check_plugin_table(now.table, who(), again);
    const std::string changed = what_changed(probed_, now.table.to_json());
    if (!changed.empty()) {
      throw InputError("plugin " + id_.name + " (" + id_.path +
                       ") declares something else in this process than when attn-tune opened "
                       "it (changed: " +
                       changed + "): did the library or module change while attn-tune ran?");
    }
    api_ = now.api;
    loaded_by_ = ::getpid();
    loaded_.store(true, std::memory_order_release);
  } catch (const InputError& e) {
    load_error_ = e.what();
    throw;
  }
}

PluginLibrary::~PluginLibrary() {
  // The plugin's state belongs to the process that ran its init; a fork's copy is not its to free.
  // In a supervised worker, after the work has returned its results (src/io/teardown.h).
  if (loaded_.load() && loaded_by_ == ::getpid() && api_.destroy != nullptr) {
    teardown([destroy = api_.destroy, state = api_.state] { destroy(state); });
  }
}

std::vector<KernelConfig> PluginLibrary::config_space(Family f) const {
  const FamilyDecl* fam = family(f);
  return fam == nullptr ? std::vector<KernelConfig>{} : declared_configs(*fam);
}

std::optional<std::string> PluginLibrary::view(const KernelConfig& cfg, ConfigView& out) const {
  const FamilyDecl* pf = family(cfg.family);
  if (pf == nullptr) {
    return "plugin " + id_.name + " does not implement " + family_name(cfg.family);
  }
  for (const auto& [k, v] : cfg.params) {
    const std::string& name = k; // a structured binding is not capturable before clang 16
    const auto it = std::find_if(pf->params.begin(), pf->params.end(),
                                 [&name](const ParamSpace& p) { return p.name == name; });
    if (it == pf->params.end()) {
      return "parameter '" + k + "' is not one plugin " + id_.name + " declares for " +
             family_name(cfg.family);
    }
  }
  out.names.clear();
  out.values.clear();
  for (const auto& [name, values] : pf->params) {
    const auto it = cfg.params.find(name);
    if (it == cfg.params.end()) {
      return "the configuration sets no '" + name + "', which plugin " + id_.name +
             " declares for " + family_name(cfg.family);
    }
    out.names.push_back(name.c_str());
    out.values.push_back(it->second);
  }
  out.c.names = out.names.data();
  out.c.values = out.values.data();
  out.c.num_params = int(out.values.size());
  return std::nullopt;
}

std::optional<std::string> PluginLibrary::can_run(const KernelConfig& cfg,
                                                  const attn_call& shape) const {
  ConfigView v;
  if (auto why = view(cfg, v)) {
    return why;
  }
  load();
  char reason[kMessageBytes] = {};
  const int rc = api_.can_run(api_.state, &v.c, &shape, reason, sizeof reason);
  reason[sizeof reason - 1] = '\0';
  if (rc < 0 && !id_.python_module.empty()) {
    // The Python bridge's can_run raised (python_bridge.cpp): the module's error, not a refusal.
    throw KernelFault(who() + ": " + message_or(reason, "can_run raised an exception"));
  }
  if (rc != 0) {
    return message_or(reason, "refused without a reason");
  }
  return std::nullopt;
}

uint64_t PluginLibrary::workspace_size(const KernelConfig& cfg, const attn_call& shape) const {
  ConfigView v;
  if (auto why = view(cfg, v)) {
    throw InputError(*why);
  }
  load();
  char err[kMessageBytes] = {};
  uint64_t bytes = 0;
  if (const int rc = api_.workspace_size(api_.state, &v.c, &shape, &bytes, err, sizeof err);
      rc != 0) {
    err[sizeof err - 1] = '\0';
    throw PluginError("plugin " + id_.name + " workspace_size failed (code " + std::to_string(rc) +
                      "): " + message_or(err, "no message"));
  }
  return bytes;
}

PluginPrepared::PluginPrepared(std::shared_ptr<const PluginLibrary> lib, KernelConfig cfg,
                               const attn_call& call, void* workspace, uint64_t bytes,
                               void* stream)
    : lib_(std::move(lib)), cfg_(std::move(cfg)) {
  if (!lib_->has_prepare()) {
    return;
  }
  lib_->load();
  PluginLibrary::ConfigView v;
  if (auto why = lib_->view(cfg_, v)) {
    throw InputError(*why);
  }
  char err[kMessageBytes] = {};
  attn_call c = call;
  c.prepared = nullptr;
  if (const int rc = lib_->api_.prepare(lib_->api_.state, &v.c, &c, workspace, bytes, stream, &raw_,
                                        err, sizeof err);
      rc != 0) {
    err[sizeof err - 1] = '\0';
    raw_ = attn_prepared{};
    throw PluginError("plugin " + lib_->id_.name + " prepare failed (code " + std::to_string(rc) +
                      "): " + message_or(err, "no message"));
  }
  made_ = true;
  if (raw_.num_ranges < 0 || (raw_.num_ranges > 0 && raw_.ranges == nullptr)) {
    const int n = raw_.num_ranges;
    release();
    throw PluginError("plugin " + lib_->id_.name + " prepare declared " + std::to_string(n) +
                      " memory ranges without an array of them");
  }
}

PluginPrepared::~PluginPrepared() { release(); }

void PluginPrepared::release() noexcept {
  if (!made_) {
    return;
  }
  made_ = false;
  if (lib_->api_.release == nullptr) {
    return;
  }
  PluginLibrary::ConfigView v;
  if (!lib_->view(cfg_, v)) {
    lib_->api_.release(lib_->api_.state, &v.c, &raw_);
  }
}

std::vector<attn_memory_range> PluginPrepared::ranges() const {
  if (!made_ || raw_.num_ranges <= 0) {
    return {};
  }
  return {raw_.ranges, raw_.ranges + raw_.num_ranges};
}

uint64_t PluginPrepared::bytes() const {
  uint64_t total = 0;
  for (const attn_memory_range& r : ranges()) {
    total += r.bytes;
  }
  return total;
}

void PluginLibrary::run(const KernelConfig& cfg, const attn_call& call, void* workspace,
                        uint64_t bytes, void* stream) const {
  ConfigView v;
  if (auto why = view(cfg, v)) {
    throw InputError(*why);
  }
  load();
  char err[kMessageBytes] = {};
  if (const int rc = api_.run(api_.state, &v.c, &call, workspace, bytes, stream, err, sizeof err);
      rc != 0) {
    err[sizeof err - 1] = '\0';
    throw PluginError("plugin " + id_.name + " run failed (code " + std::to_string(rc) +
                      "): " + message_or(err, "no message"));
  }
}

attn_call plugin_call_shape(const Problem& pr, Family f, KvLayout layout, int threads,
                            PluginHostArrays& arrays) {
  const AttnParams& p = pr.params;
  arrays.q.resize(std::size_t(pr.batch));
  arrays.k.resize(std::size_t(pr.batch));
  for (int b = 0; b < pr.batch; ++b) {
    arrays.q[std::size_t(b)] = pr.q_len(b);
    arrays.k[std::size_t(b)] = pr.k_len(b);
  }
  attn_call c{};
  c.seq_q_lens = arrays.q.data();
  c.seq_k_lens = arrays.k.data();
  arrays.k_scale.clear();
  arrays.v_scale.clear();
  if (p.fp8_cache()) {
    c.kv_dtype =
        p.cache_dtype() == DType::fp8_e4m3 ? ATTN_KV_DTYPE_FP8_E4M3 : ATTN_KV_DTYPE_FP8_E5M2;
    c.num_kv_scales = pr.num_kv_scales();
    arrays.k_scale = pr.kernel_key_scales();
    arrays.v_scale = pr.kernel_value_scales();
    if (c.num_kv_scales == 1) {
      // Past a per-tensor scale, NaN where a per-head one would go (as in the cache slots past
      // each length): a kernel that reads k_scale[kv_head] meets NaN there, which verify names,
      // not whatever the heap holds (an outside audit's plugin that did was named "the causal
      // limit is early").
      arrays.k_scale.resize(std::size_t(p.num_kv_heads), std::numeric_limits<float>::quiet_NaN());
      arrays.v_scale.resize(std::size_t(p.num_kv_heads), std::numeric_limits<float>::quiet_NaN());
    }
  }
  c.family = abi_family(f);
  c.dtype = p.dtype == DType::f32   ? ATTN_DTYPE_F32
            : p.dtype == DType::f16 ? ATTN_DTYPE_F16
                                    : ATTN_DTYPE_BF16;
  c.kv_layout = attn_kv_layout(int(layout));
  c.num_heads = p.num_heads;
  c.num_kv_heads = p.num_kv_heads;
  c.head_dim = p.head_dim;
  c.block_size = p.block_size;
  c.scale = float(p.effective_scale());
  c.softcap = float(p.softcap);
  c.causal = p.causal ? 1 : 0;
  c.window_left = p.window_left;
  c.window_right = p.window_right;
  c.batch = pr.batch;
  c.num_rows = pr.num_rows();
  c.max_q_len = pr.max_q_len();
  c.max_k_len = pr.max_k_len();
  c.num_blocks = pr.num_blocks;
  c.max_blocks_per_seq = pr.max_blocks_per_seq;
  c.host_threads = threads;
  return c;
}

} // namespace attn
