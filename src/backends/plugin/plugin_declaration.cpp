#include "src/backends/plugin/plugin_declaration.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "src/model/errors.h"

namespace attn {

namespace {

bool valid_param_name(const std::optional<std::string>& name) {
  if (!name || name->empty()) {
    return false;
  }
  return std::all_of(name->begin(), name->end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::optional<Family> declared_family(int f) {
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

std::optional<std::string> text_of(const char* s) {
  return s != nullptr ? std::optional<std::string>(s) : std::nullopt;
}

nlohmann::json text_json(const std::optional<std::string>& s) {
  return s ? nlohmann::json(*s) : nlohmann::json(nullptr);
}

std::optional<std::string> text_from(const nlohmann::json& j) {
  return j.is_null() ? std::nullopt : std::optional<std::string>(j.get<std::string>());
}

} // namespace

std::size_t plugin_api_size(uint32_t version) {
  switch (version) {
  case 1:
    return ATTN_PLUGIN_API_V1_SIZE;
  case 2: // ABI 3 added fields to attn_call only: ABI 2's table is ABI 3's
  case 3:
    return ATTN_PLUGIN_API_V3_SIZE;
  case ATTN_PLUGIN_ABI_VERSION:
    return sizeof(attn_plugin_api);
  default:
    return 0;
  }
}

const std::vector<std::string>& known_engine_rules() {
  static const std::vector<std::string> rules = {"vllm-cuda", "vllm-cpu", "seed"};
  return rules;
}

std::string source_files_words(const std::vector<std::string>& names, std::size_t total,
                               std::size_t shown) {
  std::string s = std::to_string(total) + (total == 1 ? " file" : " files");
  for (std::size_t i = 0; i < names.size() && i < shown; ++i) {
    s += (i == 0 ? ": " : ", ") + names[i];
  }
  if (total > std::min(names.size(), shown) && !names.empty()) {
    s += " and " + std::to_string(total - std::min(names.size(), shown)) + " more";
  }
  return s;
}

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
    const std::size_t listed = std::min(python_sources.size(), kMaxListedSourceFiles);
    j["source_files"] = std::vector<std::string>(python_sources.begin(),
                                                 python_sources.begin() + std::ptrdiff_t(listed));
    j["source_file_count"] = python_sources.size();
  }
  return j;
}

PluginTable read_plugin_table(int rc, const char* err, const attn_plugin_api& api) {
  PluginTable t;
  t.init_rc = rc;
  t.init_message = err != nullptr ? err : "";
  t.abi_version = api.abi_version;
  t.api_size = api.api_size;
  // Under a version this host does not speak, after a refusal or with a table of another size
  // than the version's, nothing else in it means anything: the checks stop at these.
  const std::size_t size = plugin_api_size(api.abi_version);
  if (size == 0 || rc != 0 || api.api_size != size) {
    return t;
  }
  if (api.abi_version >= 2) {
    t.engine_rule = text_of(api.engine_rule);
    t.has_prepare = api.prepare != nullptr;
  }
  t.name = text_of(api.name);
  t.version = text_of(api.version);
  t.device_kind = int(api.device_kind);
  t.has_functions = api.can_run != nullptr && api.workspace_size != nullptr && api.run != nullptr;
  t.num_families = api.num_families;
  if (api.families == nullptr || api.num_families <= 0 || api.num_families > 3) {
    return t;
  }
  for (int i = 0; i < api.num_families; ++i) {
    const attn_family_decl& d = api.families[i];
    PluginTable::Family f;
    f.family = int(d.family);
    f.kv_layout = int(d.kv_layout);
    f.writes_lse = d.writes_lse;
    f.num_params = d.num_params;
    if (api.abi_version >= 4 && api.kv_dtypes != nullptr) {
      f.kv_dtypes = api.kv_dtypes[i];
    }
    if (d.num_params > 0 && d.params != nullptr) {
      for (int k = 0; k < d.num_params; ++k) {
        const attn_param_space& ps = d.params[k];
        PluginTable::Param p;
        p.name = text_of(ps.name);
        if (ps.num_values > 0 && ps.values != nullptr) {
          p.values.assign(ps.values, ps.values + ps.num_values);
        }
        f.params.push_back(std::move(p));
      }
    }
    t.families.push_back(std::move(f));
  }
  return t;
}

nlohmann::json PluginTable::to_json() const {
  nlohmann::json fams = nlohmann::json::array();
  for (const Family& f : families) {
    nlohmann::json params = nlohmann::json::array();
    for (const Param& p : f.params) {
      params.push_back({{"name", text_json(p.name)}, {"values", p.values}});
    }
    fams.push_back({{"family", f.family},
                    {"kv_layout", f.kv_layout},
                    {"writes_lse", f.writes_lse},
                    {"num_params", f.num_params},
                    {"params", params},
                    {"kv_dtypes", f.kv_dtypes}});
  }
  return {{"init_rc", init_rc},
          {"init_message", init_message},
          {"abi_version", abi_version},
          {"api_size", api_size},
          {"name", text_json(name)},
          {"version", text_json(version)},
          {"device_kind", device_kind},
          {"has_functions", has_functions},
          {"engine_rule", text_json(engine_rule)},
          {"has_prepare", has_prepare},
          {"num_families", num_families},
          {"families", fams},
          {"python_file", python_file},
          {"python_sources_sha256", python_sources_sha256},
          {"python_sources", python_sources}};
}

PluginTable PluginTable::from_json(const nlohmann::json& j) {
  PluginTable t;
  t.init_rc = j.at("init_rc").get<int>();
  t.init_message = j.at("init_message").get<std::string>();
  t.abi_version = j.at("abi_version").get<uint32_t>();
  t.api_size = j.at("api_size").get<uint32_t>();
  t.name = text_from(j.at("name"));
  t.version = text_from(j.at("version"));
  t.device_kind = j.at("device_kind").get<int>();
  t.has_functions = j.at("has_functions").get<bool>();
  t.engine_rule = text_from(j.at("engine_rule"));
  t.has_prepare = j.at("has_prepare").get<bool>();
  t.num_families = j.at("num_families").get<int>();
  for (const nlohmann::json& jf : j.at("families")) {
    Family f;
    f.family = jf.at("family").get<int>();
    f.kv_layout = jf.at("kv_layout").get<int>();
    f.writes_lse = jf.at("writes_lse").get<int>();
    f.num_params = jf.at("num_params").get<int>();
    f.kv_dtypes = jf.at("kv_dtypes").get<uint32_t>();
    for (const nlohmann::json& jp : jf.at("params")) {
      f.params.push_back({text_from(jp.at("name")), jp.at("values").get<std::vector<int>>()});
    }
    t.families.push_back(std::move(f));
  }
  t.python_file = j.at("python_file").get<std::string>();
  t.python_sources_sha256 = j.at("python_sources_sha256").get<std::string>();
  t.python_sources = j.value("python_sources", std::vector<std::string>{});
  return t;
}

KernelSetDecl check_plugin_table(const PluginTable& t, const std::string& who, PluginIdentity& id) {
  // The version first: nothing else in the table means anything under another version. An init
  // that refused before it set any version says why it refused, not "ABI 0".
  const std::size_t size = plugin_api_size(t.abi_version);
  if (t.init_rc != 0 && t.abi_version == 0) {
    throw InputError(who + " refused to start: " +
                     (t.init_message.empty() ? std::string("no reason given") : t.init_message));
  }
  if (size == 0) {
    throw InputError(who + " was built for plugin ABI " + std::to_string(t.abi_version) +
                     "; this attn-tune speaks ABI " + std::to_string(ATTN_PLUGIN_ABI_OLDEST) +
                     " to " + std::to_string(ATTN_PLUGIN_ABI_VERSION) +
                     ": rebuild it against this attn-tune's include/attn_tune/plugin.h");
  }
  if (t.init_rc != 0) {
    throw InputError(who + " refused to start: " +
                     (t.init_message.empty() ? std::string("no reason given") : t.init_message));
  }
  if (t.api_size != size) {
    throw InputError(who + " declares a function table of " + std::to_string(t.api_size) +
                     " bytes; ABI " + std::to_string(t.abi_version) + " has " +
                     std::to_string(size));
  }
  if (!t.name || t.name->empty()) {
    throw InputError(who + " declares no name");
  }
  // Names and versions go into one-line messages, tables and file names: no control characters.
  for (const auto& [what, text] :
       {std::pair{"name", *t.name}, {"version", t.version.value_or("")}}) {
    if (std::any_of(text.begin(), text.end(),
                    [](char c) { return (unsigned char)c < 0x20 || c == 0x7f; })) {
      throw InputError(who + " declares a " + what +
                       " with a control character (a newline or a "
                       "tab): one line of printable text is expected");
    }
  }
  id.name = *t.name;
  id.version = t.version.value_or("");
  id.abi_version = t.abi_version;
  const std::string me = "plugin " + id.name + " (" + id.path + ")";
  if (t.device_kind != ATTN_DEVICE_HOST && t.device_kind != ATTN_DEVICE_CUDA) {
    throw InputError(me + " declares device kind " + std::to_string(t.device_kind) +
                     ", neither ATTN_DEVICE_HOST nor ATTN_DEVICE_CUDA");
  }
  id.device_kind = attn_device_kind(t.device_kind);
  KernelSetDecl decl;
  decl.name = id.name;
  decl.memory = t.device_kind == ATTN_DEVICE_CUDA ? MemoryKind::cuda : MemoryKind::host;
  if (t.engine_rule && !t.engine_rule->empty()) {
    const auto& rules = known_engine_rules();
    if (std::find(rules.begin(), rules.end(), *t.engine_rule) == rules.end()) {
      std::string list;
      for (const auto& r : rules) {
        list += (list.empty() ? "" : ", ") + r;
      }
      throw InputError(me + " names engine rule '" + *t.engine_rule + "'; the rules are " + list +
                       " (or none)");
    }
    decl.engine_rule = *t.engine_rule;
  }
  if (!t.has_functions) {
    throw InputError(me + " leaves can_run, workspace_size or run unset");
  }
  if (t.num_families <= 0 || t.num_families > 3) {
    throw InputError(me + " declares " + std::to_string(t.num_families) +
                     " families; it must implement 1 to 3 of decode_v1, decode_v2, prefill");
  }
  if (int(t.families.size()) != t.num_families) {
    throw InputError(me + " declares " + std::to_string(t.num_families) +
                     " families without an array of them (api->families is NULL)");
  }
  std::set<Family> seen;
  for (const PluginTable::Family& d : t.families) {
    const auto fam = declared_family(d.family);
    if (!fam) {
      throw InputError(me + " declares family " + std::to_string(d.family) +
                       ", which is none of decode_v1, decode_v2, prefill");
    }
    const std::string fname = family_name(*fam);
    if (!seen.insert(*fam).second) {
      throw InputError(me + " declares " + fname + " twice");
    }
    if (d.kv_layout < 0 || d.kv_layout > 2) {
      throw InputError(me + " declares KV layout " + std::to_string(d.kv_layout) + " for " + fname +
                       ", none of HND, NHD, vllm");
    }
    FamilyDecl pf;
    pf.family = *fam;
    pf.layout = KvLayout(d.kv_layout);
    if (d.writes_lse != 0 && d.writes_lse != 1) {
      throw InputError(me + " declares writes_lse " + std::to_string(d.writes_lse) + " for " +
                       fname + "; it is 1 (run writes call->lse) or 0");
    }
    pf.writes_lse = d.writes_lse == 1;
    constexpr uint32_t kFp8Bits =
        ATTN_KV_DTYPE_BIT(ATTN_KV_DTYPE_FP8_E4M3) | ATTN_KV_DTYPE_BIT(ATTN_KV_DTYPE_FP8_E5M2);
    if ((d.kv_dtypes & ~kFp8Bits) != 0) {
      char bits[16];
      std::snprintf(bits, sizeof bits, "0x%x", unsigned(d.kv_dtypes));
      throw InputError(me + " declares KV-cache dtype mask " + bits + " for " + fname +
                       "; its bits are ATTN_KV_DTYPE_BIT(ATTN_KV_DTYPE_FP8_E4M3) (0x2) and "
                       "ATTN_KV_DTYPE_BIT(ATTN_KV_DTYPE_FP8_E5M2) (0x4)");
    }
    if ((d.kv_dtypes & ATTN_KV_DTYPE_BIT(ATTN_KV_DTYPE_FP8_E4M3)) != 0) {
      pf.fp8_kv.push_back(DType::fp8_e4m3);
    }
    if ((d.kv_dtypes & ATTN_KV_DTYPE_BIT(ATTN_KV_DTYPE_FP8_E5M2)) != 0) {
      pf.fp8_kv.push_back(DType::fp8_e5m2);
    }
    if (d.num_params < 0) {
      throw InputError(me + " declares " + std::to_string(d.num_params) + " parameters for " +
                       fname + "; the count is 0 (one configuration) or more");
    }
    if (int(d.params.size()) != d.num_params) {
      throw InputError(me + " declares " + std::to_string(d.num_params) + " parameters for " +
                       fname + " without an array of them");
    }
    std::set<std::string> names;
    for (const PluginTable::Param& ps : d.params) {
      if (!valid_param_name(ps.name)) {
        throw InputError(me + " declares a " + fname +
                         " parameter whose name is empty or not made of a-z, 0-9 and _");
      }
      if (!names.insert(*ps.name).second) {
        throw InputError(me + " declares " + fname + " parameter '" + *ps.name + "' twice");
      }
      if (ps.values.empty()) {
        throw InputError(me + " declares no values for " + fname + " parameter '" + *ps.name + "'");
      }
      pf.params.push_back({*ps.name, ps.values});
    }
    int64_t space = 1;
    for (const ParamSpace& p : pf.params) {
      space *= int64_t(distinct_values(p.values).size());
      if (space > kMaxDeclaredConfigs) {
        throw InputError(me + " declares more than " + std::to_string(kMaxDeclaredConfigs) +
                         " " + fname + " configurations (the product of its parameters' value "
                         "counts); declare fewer values");
      }
    }
    if (*fam == Family::decode_v2) {
      // A partition space is optional (the kernel may choose its own splits); where there is
      // one, its values are key counts.
      const auto it = std::find_if(pf.params.begin(), pf.params.end(),
                                   [](const ParamSpace& p) { return p.name == "partition"; });
      for (int v : it != pf.params.end() ? it->values : std::vector<int>{}) {
        if (v <= 0) {
          throw InputError(me + " declares decode_v2 partition " + std::to_string(v) +
                           "; partitions are positive multiples of block_size");
        }
      }
    }
    decl.families.push_back(std::move(pf));
  }
  return decl;
}

} // namespace attn
