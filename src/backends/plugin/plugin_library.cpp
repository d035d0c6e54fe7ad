#include "src/backends/plugin/plugin_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "src/io/sha256.h"
#include "src/model/errors.h"

namespace attn {

namespace {

constexpr std::size_t kMessageBytes = 1024;

bool valid_param_name(const char* s) {
  if (s == nullptr || *s == '\0') {
    return false;
  }
  for (; *s != '\0'; ++s) {
    const char c = *s;
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      return false;
    }
  }
  return true;
}

std::optional<Family> family_of(int f) {
  switch (f) {
  case ATTN_FAMILY_DECODE_V1:
    return Family::decode_v1;
  case ATTN_FAMILY_DECODE_V2:
    return Family::decode_v2;
  case ATTN_FAMILY_PREFILL:
    return Family::prefill;
  default:
    return std::nullopt;
  }
}

attn_family abi_family(Family f) {
  return f == Family::decode_v1   ? ATTN_FAMILY_DECODE_V1
         : f == Family::decode_v2 ? ATTN_FAMILY_DECODE_V2
                                  : ATTN_FAMILY_PREFILL;
}

std::string message_or(const char* buf, const char* fallback) {
  return buf[0] != '\0' ? std::string(buf) : std::string(fallback);
}

} // namespace

nlohmann::json PluginIdentity::to_json() const {
  const bool py = !python_module.empty();
  nlohmann::json j = {
      {"source", "plugin"},
      {"name", name},
      {"version", version},
      {"abi_version", abi_version},
      {"library_sha256", library_sha256},
      {"library", std::filesystem::path(py ? python_file : path).filename().string()},
      {"device_kind", device_kind == ATTN_DEVICE_CUDA ? "cuda" : "host"}};
  if (py) {
    j["bridge"] = "python";
    j["module"] = python_module;
  }
  return j;
}

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

std::shared_ptr<PluginLibrary> PluginLibrary::open(const std::string& path) {
  std::shared_ptr<PluginLibrary> lib(new PluginLibrary());
  lib->id_.path = path;
  if (is_python_kernels(path)) {
    const std::string spec = path.substr(7);
    const std::string who = path;
    const std::string bridge = python_bridge_path();
    if (bridge.empty()) {
      throw InputError(who + ": this attn-tune was built without its Python bridge (CMake found "
                             "no Python 3 development files: install python3-dev and rebuild, "
                             "or point ATTN_TUNE_PYTHON_BRIDGE at libattn_tune_python.so)");
    }
    // Never unloaded: the interpreter it starts lives as long as the process.
    lib->handle_ = ::dlopen(bridge.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (lib->handle_ == nullptr) {
      const char* why = ::dlerror();
      throw InputError(who + ": cannot load the Python bridge " + bridge + ": " +
                       (why ? why : "unknown dlopen error"));
    }
    using Select = int (*)(const char*, const char*, char*, size_t);
    using Identity = const char* (*)();
    auto select = reinterpret_cast<Select>(::dlsym(lib->handle_, "attn_tune_python_bridge_select"));
    auto identity =
        reinterpret_cast<Identity>(::dlsym(lib->handle_, "attn_tune_python_bridge_identity"));
    if (select == nullptr || identity == nullptr) {
      throw InputError(who + ": " + bridge + " is not attn-tune's Python bridge");
    }
    char err[kMessageBytes] = {};
    if (select(spec.c_str(), attn_python_dir().c_str(), err, sizeof err) != 0) {
      throw InputError(who + ": " + message_or(err, "refused"));
    }
    lib->initialise(who);
    const nlohmann::json id =
        nlohmann::json::parse(identity(), nullptr, /*allow_exceptions=*/false);
    lib->id_.python_module = spec;
    lib->id_.python_file = id.is_object() ? id.value("file", "") : "";
    lib->id_.library_sha256 = id.is_object() ? id.value("sources_sha256", "") : "";
    return lib;
  }
  const std::string who = "plugin " + path;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw InputError(who + ": no such file");
  }
  lib->id_.library_sha256 = sha256_file(path);
  // dlopen searches the library path for a bare name; a path with a slash is taken as it is.
  const std::string load_path = path.find('/') == std::string::npos ? "./" + path : path;
  lib->handle_ = ::dlopen(load_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib->handle_ == nullptr) {
    const char* why = ::dlerror();
    throw InputError(who + ": cannot load it: " + (why ? why : "unknown dlopen error"));
  }
  lib->initialise(who);
  return lib;
}

void PluginLibrary::initialise(const std::string& who) {
  const std::string& path = id_.path;
  void* sym = ::dlsym(handle_, ATTN_PLUGIN_ENTRY_NAME);
  if (sym == nullptr) {
    throw InputError(who + " exports no " + ATTN_PLUGIN_ENTRY_NAME +
                     "(): it is not an attn-tune kernel plugin (docs/plugins.md)");
  }
  auto init = reinterpret_cast<attn_plugin_init_fn>(sym);
  char err[kMessageBytes] = {};
  attn_plugin_api& api = api_;
  const int rc = init(ATTN_PLUGIN_ABI_VERSION, &api, sizeof api, err, sizeof err);
  err[sizeof err - 1] = '\0';
  // The version first: nothing else in the table means anything under another version.
  if (api.abi_version != ATTN_PLUGIN_ABI_VERSION) {
    throw InputError(who + " was built for plugin ABI " + std::to_string(api.abi_version) +
                     "; this attn-tune speaks ABI " + std::to_string(ATTN_PLUGIN_ABI_VERSION) +
                     ": rebuild it against this attn-tune's include/attn_tune/plugin.h");
  }
  if (rc != 0) {
    throw InputError(who + " refused to start: " + message_or(err, "no reason given"));
  }
  if (api.api_size != sizeof api) {
    throw InputError(who + " declares a function table of " + std::to_string(api.api_size) +
                     " bytes; ABI " + std::to_string(ATTN_PLUGIN_ABI_VERSION) + " has " +
                     std::to_string(sizeof api));
  }
  if (api.name == nullptr || *api.name == '\0') {
    throw InputError(who + " declares no name");
  }
  id_.name = api.name;
  id_.version = api.version != nullptr ? api.version : "";
  id_.abi_version = api.abi_version;
  const std::string me = "plugin " + id_.name + " (" + path + ")";
  if (api.device_kind != ATTN_DEVICE_HOST && api.device_kind != ATTN_DEVICE_CUDA) {
    throw InputError(me + " declares device kind " + std::to_string(int(api.device_kind)) +
                     ", neither ATTN_DEVICE_HOST nor ATTN_DEVICE_CUDA");
  }
  id_.device_kind = api.device_kind;
  decl_.name = id_.name;
  decl_.memory = api.device_kind == ATTN_DEVICE_CUDA ? MemoryKind::cuda : MemoryKind::host;
  if (api.can_run == nullptr || api.workspace_size == nullptr || api.run == nullptr) {
    throw InputError(me + " leaves can_run, workspace_size or run unset");
  }
  if (api.families == nullptr || api.num_families <= 0 || api.num_families > 3) {
    throw InputError(me + " declares " + std::to_string(api.num_families) +
                     " families; it must implement 1 to 3 of decode_v1, decode_v2, prefill");
  }
  std::set<Family> seen;
  for (int i = 0; i < api.num_families; ++i) {
    const attn_family_decl& d = api.families[i];
    const auto fam = family_of(int(d.family));
    if (!fam) {
      throw InputError(me + " declares family " + std::to_string(int(d.family)) +
                       ", which is none of decode_v1, decode_v2, prefill");
    }
    const std::string fname = family_name(*fam);
    if (!seen.insert(*fam).second) {
      throw InputError(me + " declares " + fname + " twice");
    }
    if (int(d.kv_layout) < 0 || int(d.kv_layout) > 2) {
      throw InputError(me + " declares KV layout " + std::to_string(int(d.kv_layout)) + " for " +
                       fname + ", none of HND, NHD, vllm");
    }
    FamilyDecl pf;
    pf.family = *fam;
    pf.layout = KvLayout(int(d.kv_layout));
    pf.writes_lse = d.writes_lse != 0;
    if (d.num_params < 0 || (d.num_params > 0 && d.params == nullptr)) {
      throw InputError(me + " declares " + std::to_string(d.num_params) + " parameters for " +
                       fname + " without an array of them");
    }
    std::set<std::string> names;
    for (int k = 0; k < d.num_params; ++k) {
      const attn_param_space& ps = d.params[k];
      if (!valid_param_name(ps.name)) {
        throw InputError(me + " declares a " + fname +
                         " parameter whose name is empty or not made of a-z, 0-9 and _");
      }
      if (!names.insert(ps.name).second) {
        throw InputError(me + " declares " + fname + " parameter '" + ps.name + "' twice");
      }
      if (ps.num_values <= 0 || ps.values == nullptr) {
        throw InputError(me + " declares no values for " + fname + " parameter '" + ps.name + "'");
      }
      pf.params.push_back({ps.name, std::vector<int>(ps.values, ps.values + ps.num_values)});
    }
    if (*fam == Family::decode_v2) {
      const auto it = std::find_if(pf.params.begin(), pf.params.end(),
                                   [](const ParamSpace& p) { return p.name == "partition"; });
      if (it == pf.params.end()) {
        throw InputError(me + " declares decode_v2 without a 'partition' parameter (keys per "
                              "split-KV partition), which the validator and the table need");
      }
      for (int v : it->values) {
        if (v <= 0) {
          throw InputError(me + " declares decode_v2 partition " + std::to_string(v) +
                           "; partitions are positive multiples of block_size");
        }
      }
    }
    decl_.families.push_back(std::move(pf));
  }
}

PluginLibrary::~PluginLibrary() {
  if (api_.destroy != nullptr && api_.abi_version == ATTN_PLUGIN_ABI_VERSION) {
    api_.destroy(api_.state);
  }
  // The library stays mapped: a plugin linked with the CUDA runtime registers its kernels at
  // load time and unregisters them from exit handlers, which must still find its code.
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
    const auto it = std::find_if(pf->params.begin(), pf->params.end(),
                                 [&k](const ParamSpace& p) { return p.name == k; });
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
  char reason[kMessageBytes] = {};
  if (api_.can_run(api_.state, &v.c, &shape, reason, sizeof reason) != 0) {
    reason[sizeof reason - 1] = '\0';
    return message_or(reason, "refused without a reason");
  }
  return std::nullopt;
}

uint64_t PluginLibrary::workspace_size(const KernelConfig& cfg, const attn_call& shape) const {
  ConfigView v;
  if (auto why = view(cfg, v)) {
    throw InputError(*why);
  }
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

void PluginLibrary::run(const KernelConfig& cfg, const attn_call& call, void* workspace,
                        uint64_t bytes, void* stream) const {
  ConfigView v;
  if (auto why = view(cfg, v)) {
    throw InputError(*why);
  }
  char err[kMessageBytes] = {};
  if (const int rc = api_.run(api_.state, &v.c, &call, workspace, bytes, stream, err, sizeof err);
      rc != 0) {
    err[sizeof err - 1] = '\0';
    throw PluginError("plugin " + id_.name + " run failed (code " + std::to_string(rc) +
                      "): " + message_or(err, "no message"));
  }
}

attn_call plugin_call_shape(const Problem& pr, Family f, KvLayout layout, int threads) {
  const AttnParams& p = pr.params;
  attn_call c{};
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
