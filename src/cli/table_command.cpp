// `attn-tune table show|lookup`: explain a threshold table, or answer one decode call's
// v1/v2 question from it the way an engine would (through the header-only reader).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "include/attn_tune/threshold_table_reader.hpp"
#include "src/backends/backend.h"
#include "src/backends/plugin/plugin_library.h"
#include "src/backends/registry.h"
#include "src/cli/commands.h"
#include "src/cli/table_text.h"
#include "src/model/errors.h"
#include "src/tuning/results_file.h"
#include "src/tuning/table_schema.h"

namespace attn::cli {

namespace {

struct TableOptions {
  std::string file;
  bool json = false;
  std::string device;
  std::string kernels; // the kernels the caller runs: a plugin library, a plugin name, "attn-tune"
  attn_tune::Query q;
};

attn_tune::ThresholdTableReader load_table(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    throw InputError("cannot read threshold table '" + path + "'");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::parse_error&) {
    throw InputError("'" + path + "' is not valid JSON");
  }
  try {
    return attn_tune::ThresholdTableReader(std::move(j));
  } catch (const std::exception& e) {
    throw InputError("'" + path + "': " + e.what());
  }
}

// The device this machine would sweep on (the --device spec, or GPU 0 else the CPU).
std::optional<DeviceInfo> current_device(const std::string& spec) {
  const DeviceList l = list_devices({});
  std::string id = spec;
  if (!id.empty() && std::isdigit(static_cast<unsigned char>(id[0]))) {
    id = "cuda:" + id;
  }
  for (const auto& d : l.devices) {
    if (id.empty() ? true : d.id == id) {
      return d;
    }
  }
  return std::nullopt;
}

void warn_if_other_device(const nlohmann::json& table, const std::string& spec) {
  const auto& td = table.at("provenance").at("device");
  const auto cur = current_device(spec);
  if (!cur) {
    std::fprintf(stderr,
                 "attn-tune: warning: device '%s' is not on this machine; cannot tell "
                 "whether the table (measured on %s) fits it\n",
                 spec.c_str(), td.value("name", "?").c_str());
    return;
  }
  const bool same =
      td.value("backend", "") == cur->backend && td.value("name", "") == cur->name &&
      (cur->uuid.empty() || td.value("uuid", "").empty() || td.value("uuid", "") == cur->uuid);
  if (!same) {
    std::fprintf(stderr,
                 "attn-tune: warning: this table was measured on %s (%s), not on this machine's "
                 "%s (%s); its thresholds may not hold here\n",
                 td.value("name", "?").c_str(), td.value("id", "?").c_str(), cur->name.c_str(),
                 cur->id.c_str());
  }
}

// A table describes the kernels that were timed for it: warns when the caller runs others.
// `named` is a plugin library (compared by name and SHA-256), a plugin's name, or "attn-tune"
// (the built-in kernels).
void warn_if_other_kernels(const nlohmann::json& table, const std::string& named) {
  const nlohmann::json& pv = table.at("provenance");
  const nlohmann::json had = pv.contains("kernels")
                                 ? pv["kernels"]
                                 : nlohmann::json{{"source", "built-in"}, {"name", "attn-tune"}};
  nlohmann::json want;
  std::error_code ec;
  if (is_python_kernels(named) || std::filesystem::is_regular_file(named, ec)) {
    want = PluginLibrary::open(named)->identity().to_json();
  } else if (named == "attn-tune" || named == "built-in") {
    want = {{"source", "built-in"}, {"name", "attn-tune"}};
  } else {
    // A bare name: the same plugin by name, whatever its build.
    want = {
        {"source", "plugin"}, {"name", named}, {"library_sha256", had.value("library_sha256", "")}};
  }
  if (kernels_identity(had) != kernels_identity(want)) {
    std::fprintf(stderr,
                 "attn-tune: warning: this table timed %s, not %s; its thresholds describe the "
                 "kernels that were timed\n",
                 kernels_label(had).c_str(), kernels_label(want).c_str());
  }
}

int run_table_show(const TableOptions& o) {
  const auto t = load_table(o.file);
  if (o.json) {
    std::printf("%s\n", t.json().dump(2).c_str());
    return kExitOk;
  }
  try {
    validate_table(t.json());
  } catch (const InputError& e) {
    throw InputError("'" + o.file + "': " + e.what());
  }
  std::printf("%s", describe_table(t.json()).c_str());
  return kExitOk;
}

int run_table_lookup(const TableOptions& o) {
  const auto t = load_table(o.file);
  attn_tune::Query q = o.q;
  // An unknown dtype is a usage error, not a silent nearest match; aliases become table names.
  q.dtype = std::string(dtype_name(parse_dtype(o.q.dtype)));
  if (o.q.num_heads % o.q.num_kv_heads != 0) {
    throw InputError("--num-heads " + std::to_string(o.q.num_heads) +
                     " is not a multiple of --num-kv-heads " + std::to_string(o.q.num_kv_heads));
  }
  warn_if_other_device(t.json(), o.device);
  if (!o.kernels.empty()) {
    warn_if_other_kernels(t.json(), o.kernels);
  }
  attn_tune::Choice c;
  try {
    c = t.lookup(q);
  } catch (const std::exception& e) {
    throw InputError("'" + o.file + "': " + e.what());
  }
  if (!c.exact_point) {
    std::fprintf(stderr,
                 "attn-tune: note: no measured point with this shape; using the nearest (batch=%d "
                 "kvh=%d gqa=%d d=%d bs=%d %s, distance %.2f)\n",
                 c.point.at("batch").get<int>(), c.point.at("num_kv_heads").get<int>(),
                 c.point.at("gqa_ratio").get<int>(), c.point.at("head_dim").get<int>(),
                 c.point.at("block_size").get<int>(),
                 c.point.at("dtype").get<std::string>().c_str(), c.distance);
  }
  if (o.json) {
    nlohmann::json j = {{"family", c.family},
                        {"config", c.config},
                        {"exact_point", c.exact_point},
                        {"distance", c.distance},
                        {"measured_context", c.measured_context},
                        {"point", c.point}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s %s\n", c.family.c_str(), c.config_key.c_str());
  }
  return kExitOk;
}

} // namespace

Command setup_table(CLI::App& root) {
  auto opt = std::make_shared<TableOptions>();
  CLI::App* sub = root.add_subcommand("table", "Show a threshold table or look a decode call up");
  sub->require_subcommand(1);
  CLI::App* show = sub->add_subcommand("show", "Explain a threshold table");
  show->add_option("FILE", opt->file, "threshold_table.json")->required();
  show->add_flag("--json", opt->json, "Print the table itself (pretty JSON)");
  CLI::App* lk = sub->add_subcommand("lookup", "v1 or v2, and the configuration, for one call");
  lk->add_option("FILE", opt->file, "threshold_table.json")->required();
  lk->add_option("--batch", opt->q.batch, "Sequences in the batch")
      ->required()
      ->check(CLI::PositiveNumber);
  lk->add_option("--context-len", opt->q.context_len, "Longest context length")
      ->required()
      ->check(CLI::PositiveNumber);
  lk->add_option("--num-heads", opt->q.num_heads, "Query heads")
      ->required()
      ->check(CLI::PositiveNumber);
  lk->add_option("--num-kv-heads", opt->q.num_kv_heads, "KV heads")
      ->required()
      ->check(CLI::PositiveNumber);
  lk->add_option("--head-dim", opt->q.head_dim, "Head dimension")
      ->required()
      ->check(CLI::PositiveNumber);
  lk->add_option("--block-size", opt->q.block_size, "KV cache block size")
      ->required()
      ->check(CLI::PositiveNumber);
  lk->add_option("--dtype", opt->q.dtype, "fp32, fp16 or bf16")->required();
  lk->add_option("--window-left", opt->q.window_left, "Sliding window (-1: none)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 30));
  lk->add_option("--softcap", opt->q.softcap, "Logit softcap (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  lk->add_option("--device", opt->device,
                 "Device to compare the table's with (default: GPU 0, else cpu)");
  lk->add_option("--kernels", opt->kernels,
                 "The kernels you run: a plugin library (PATH.so), a plugin's name, or attn-tune "
                 "(built-in); warns when the table timed others");
  lk->add_flag("--json", opt->json, "Print the choice as JSON");
  return {sub, [opt, show, lk] {
            if (show->parsed()) {
              return run_table_show(*opt);
            }
            return run_table_lookup(*opt);
          }};
}

} // namespace attn::cli
