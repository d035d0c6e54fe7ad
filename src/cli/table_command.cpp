// `attn-tune table show|lookup`: explain a threshold table, or answer one decode call's
// v1/v2 question from it the way an engine would (through the header-only reader).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "include/attn_tune/fleet_table.hpp"
#include "include/attn_tune/threshold_table_reader.hpp"
#include "src/backends/backend.h"
#include "src/backends/plugin/plugin_library.h"
#include "src/backends/registry.h"
#include "src/cli/commands.h"
#include "src/cli/kernels_option.h"
#include "src/cli/table_text.h"
#include "src/io/atomic_file.h"
#include "src/model/errors.h"
#include "src/tuning/fleet.h"
#include "src/tuning/results_file.h"
#include "src/tuning/table_schema.h"

namespace attn::cli {

namespace {

// A query whose batch and context length are unset (0) until --batch and --context-len or
// --seq-lens give them.
attn_tune::Query no_batch() {
  attn_tune::Query q;
  q.batch = 0;
  q.context_len = 0;
  return q;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out(1);
  for (char ch : s) {
    if (ch == ',') {
      out.emplace_back();
    } else if (ch != ' ') {
      out.back() += ch;
    }
  }
  return out;
}

struct TableOptions {
  std::string file;
  bool json = false;
  std::string device;
  std::string kernels; // the kernels the caller runs: a plugin library, a plugin name, "attn-tune"
  attn_tune::Query q = no_batch();
  std::string seq_lens; // lookup --seq-lens 30,20000,512
  attn_tune::FleetQuery fleet; // --device-name, --nearest, --sm-count, --bandwidth-gbps
  std::string out;             // table combine: the fleet file to write
  std::vector<std::string> tables;
};

// A single table read from `path` as `doc`, checked before anything uses it: the engine
// reader's words first (another file, another version: what engines see too), then the schema.
attn_tune::ThresholdTableReader checked_table(const nlohmann::json& doc, const std::string& path) {
  try {
    attn_tune::ThresholdTableReader t(doc);
    validate_table(t.json());
    return t;
  } catch (const std::exception& e) { // the schema's InputError and the reader's refusals
    throw InputError("'" + path + "': " + e.what());
  }
}

void warn_if_other_device(const nlohmann::json& table, const std::string& spec) {
  const auto& td = table.at("provenance").at("device");
  const auto cur = find_device(spec);
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
  if (is_python_kernels(named) || std::filesystem::is_regular_file(named, ec) ||
      named.find('/') != std::string::npos || named.ends_with(".so")) {
    // A path (PluginLibrary::open refuses one that is no plugin library, exit 2).
    want = PluginLibrary::open(named)->identity().to_json();
  } else if (named == "attn-tune" || named == "built-in") {
    // The built-in kernels at whatever build level the table's were (the caller's is not known).
    want = {{"source", "built-in"}, {"name", "attn-tune"}};
    if (had.contains("isa")) {
      want["isa"] = had["isa"];
    }
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

// `table show` of a fleet file: its entries, then each entry's table.
int show_fleet(const TableOptions& o, const nlohmann::json& doc) {
  if (o.json) {
    std::printf("%s\n", doc.dump(2).c_str());
    return kExitOk;
  }
  const auto& devices = doc.at("devices");
  std::printf("%s: fleet table of %zu device%s\n", o.file.c_str(), devices.size(),
              devices.size() == 1 ? "" : "s");
  for (const auto& e : devices) {
    // A CPU entry has no SMs: its SM count is 0, not worth a line's "0 SMs".
    const int sms = e.value("sm_count", 0);
    std::printf("  %s: %s%s\n", e.value("device", "").c_str(), e.value("raw_name", "").c_str(),
                sms > 0 ? (", " + std::to_string(sms) + " SMs").c_str() : "");
  }
  for (const auto& e : devices) {
    std::printf("\n== %s ==\n", e.value("device", "").c_str());
    try {
      validate_table(e.at("table"));
    } catch (const InputError& ex) {
      throw InputError("'" + o.file + "' entry " + e.value("device", "") + ": " + ex.what());
    }
    std::printf("%s", describe_table(e.at("table")).c_str());
  }
  return kExitOk;
}

int run_table_show(const TableOptions& o) {
  const nlohmann::json doc = load_table_json(o.file);
  if (attn_tune::FleetTable::is_fleet(doc)) {
    validate_fleet(doc, o.file);
    return show_fleet(o, doc);
  }
  // Checked before anything is shown, --json included (its output is then a valid table).
  const auto t = checked_table(doc, o.file);
  if (o.json) {
    std::printf("%s\n", t.json().dump(2).c_str());
    return kExitOk;
  }
  std::printf("%s", describe_table(t.json()).c_str());
  return kExitOk;
}

// The table a lookup reads: a single table as it is, or a fleet file's entry for the device
// (--device-name, else this machine's device), saying which entry answers.
attn_tune::FleetSelection table_for_lookup(const TableOptions& o) {
  const nlohmann::json doc = load_table_json(o.file);
  if (attn_tune::FleetTable::is_fleet(doc)) {
    validate_fleet(doc, o.file);
  } else {
    (void)checked_table(doc, o.file);
  }
  attn_tune::FleetQuery fq = o.fleet;
  if (fq.device_name.empty() && attn_tune::FleetTable::is_fleet(doc)) {
    const auto cur = find_device(o.device);
    if (!cur) {
      throw InputError("'" + o.file + "' is a fleet table and device '" + o.device +
                       "' is not on this machine; name one with --device-name");
    }
    fq.device_name = cur->name;
  }
  try {
    attn_tune::FleetSelection s = attn_tune::open_table_for_device(doc, fq);
    if (attn_tune::FleetTable::is_fleet(doc) || !s.said.empty()) {
      std::fprintf(stderr, "attn-tune: %s%s\n", s.exact ? "" : "note: ", s.said.c_str());
    }
    return s;
  } catch (const std::exception& e) {
    throw InputError("'" + o.file + "': " + e.what());
  }
}

int run_table_lookup(const TableOptions& o) {
  const attn_tune::FleetSelection sel = table_for_lookup(o);
  const attn_tune::ThresholdTableReader& t = sel.table;
  attn_tune::Query q = o.q;
  if (!o.seq_lens.empty()) {
    for (const std::string& part : split_commas(o.seq_lens)) {
      char* end = nullptr;
      const long v = std::strtol(part.c_str(), &end, 10);
      if (part.empty() || *end != '\0' || v < 1 || v > 10'000'000) {
        throw InputError("--seq-lens: '" + part + "' is not a context length from 1 to 10000000");
      }
      q.seq_lens.push_back(int(v));
    }
    q.batch = int(q.seq_lens.size());
    q.context_len = *std::max_element(q.seq_lens.begin(), q.seq_lens.end());
    // As the Python reader: --batch or --context-len next to --seq-lens must agree with it, or
    // one of the two descriptions of the batch would be silently ignored.
    if (o.q.batch > 0 && o.q.batch != q.batch) {
      throw InputError("--batch " + std::to_string(o.q.batch) + " disagrees with --seq-lens (" +
                       std::to_string(q.batch) + " lengths)");
    }
    if (o.q.context_len > 0 && o.q.context_len != q.context_len) {
      throw InputError("--context-len " + std::to_string(o.q.context_len) +
                       " disagrees with --seq-lens (longest " + std::to_string(q.context_len) +
                       ")");
    }
  } else if (o.q.batch < 1 || o.q.context_len < 1) {
    throw InputError("give --batch and --context-len, or a batch's --seq-lens");
  }
  // An unknown dtype is a usage error, not a silent nearest match; aliases become table names,
  // by the readers' own rules, so that the command takes exactly the names they take
  // (torch.float16, torch.float8_e5m2, ...).
  try {
    q.dtype = attn_tune::ThresholdTableReader::canonical_dtype(o.q.dtype);
    q.kv_dtype = attn_tune::ThresholdTableReader::canonical_kv_dtype(o.q.kv_dtype, q.dtype);
  } catch (const std::invalid_argument& e) {
    if (fp8_named(o.q.dtype)) { // an fp8 name given as the query's dtype: say which option takes it
      throw InputError("--dtype: '" + o.q.dtype +
                       "' is a KV-cache dtype (queries and outputs are "
                       "fp32, fp16 or bf16): give the cache's with --kv-dtype " +
                       o.q.dtype);
    }
    throw InputError(e.what());
  }
  if (o.q.num_heads % o.q.num_kv_heads != 0) {
    throw InputError("--num-heads " + std::to_string(o.q.num_heads) +
                     " is not a multiple of --num-kv-heads " + std::to_string(o.q.num_kv_heads));
  }
  if (o.fleet.device_name.empty() && !attn_tune::FleetTable::is_fleet(load_table_json(o.file))) {
    warn_if_other_device(t.json(), o.device); // with a device name, the name is the device
  }
  if (!o.kernels.empty()) {
    warn_if_other_kernels(t.json(), o.kernels);
  }
  attn_tune::Choice c;
  try {
    c = t.lookup(q);
  } catch (const std::exception& e) {
    throw InputError("'" + o.file + "': " + e.what());
  }
  // A rule's leaf that defers to the decode points hands back their Choice: its point and
  // distance are the decode point's, and the note says so.
  const bool via_points = c.batch_rule && c.batch_path.ends_with("decode points");
  if (c.batch_rule && c.rule_distance > 0.0) {
    std::fprintf(stderr,
                 "attn-tune: note: no batch rule with this shape; using the nearest (kvh=%d gqa=%d "
                 "d=%d bs=%d %s, distance %.2f)%s\n",
                 c.rule.at("num_kv_heads").get<int>(), c.rule.at("gqa_ratio").get<int>(),
                 c.rule.at("head_dim").get<int>(), c.rule.at("block_size").get<int>(),
                 attn_tune::ThresholdTableReader::dtypes_of(c.rule).c_str(), c.rule_distance,
                 via_points ? ", whose leaf defers to the decode points" : "");
  }
  if ((!c.batch_rule || via_points) && !c.exact_point) {
    std::fprintf(stderr,
                 "attn-tune: note: no measured point with this shape; using the nearest (batch=%d "
                 "kvh=%d gqa=%d d=%d bs=%d %s, distance %.2f)\n",
                 c.point.at("batch").get<int>(), c.point.at("num_kv_heads").get<int>(),
                 c.point.at("gqa_ratio").get<int>(), c.point.at("head_dim").get<int>(),
                 c.point.at("block_size").get<int>(),
                 attn_tune::ThresholdTableReader::dtypes_of(c.point).c_str(), c.distance);
  }
  if (o.json) {
    nlohmann::json j = {{"family", c.family},
                        {"config", c.config},
                        {"exact_point", c.exact_point},
                        {"distance", c.distance},
                        {"measured_context", c.measured_context},
                        {"point", c.point}};
    if (c.batch_rule) {
      j["batch_rule"] = c.batch_path;
      j["rule"] = c.rule;
      j["rule_distance"] = c.rule_distance;
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s %s%s", c.family.c_str(), c.config_key.c_str(),
                c.kernel_chooses_splits() ? " (the kernel chooses its splits)" : "");
    if (c.batch_rule) {
      std::printf(" (batch rule: %s)", c.batch_path.empty() ? "one leaf" : c.batch_path.c_str());
    }
    std::printf("\n");
  }
  return kExitOk;
}

// `table combine`: one fleet entry per table (a fleet file given as input adds its entries),
// keyed by canonical device name; two tables of one device model are refused.
int run_table_combine(const TableOptions& o) {
  const nlohmann::json fleet = combine_fleet(o.tables);
  write_json_atomically(o.out, fleet);
  const nlohmann::json& devices = fleet.at("devices");
  for (const auto& e : devices) {
    std::printf("table combine: %s <- %s (%s)\n", e.value("device", "").c_str(),
                e.value("raw_name", "").c_str(), e.value("source", "").c_str());
  }
  std::printf("table combine: fleet table %s (%zu device%s)\n", o.out.c_str(), devices.size(),
              devices.size() == 1 ? "" : "s");
  return kExitOk;
}

// CLI11's PositiveNumber says "Value 0 not in range 0.000000 to 1.797...e308" for 0.
const CLI::Validator kPositiveInt(
    [](const std::string& text) {
      char* end = nullptr;
      const long long v = std::strtoll(text.c_str(), &end, 10);
      return end != text.c_str() && *end == '\0' && v > 0
                 ? std::string()
                 : "expected an integer > 0, got '" + text + "'";
    },
    "INT > 0");

} // namespace

Command setup_table(CLI::App& root) {
  auto opt = std::make_shared<TableOptions>();
  CLI::App* sub = root.add_subcommand(
      "table", "Show a threshold table, look a decode call up, or combine tables into a fleet");
  sub->require_subcommand(1);
  CLI::App* show = sub->add_subcommand("show", "Explain a threshold table");
  show->add_option("FILE", opt->file,
                   "threshold_table.json (or the sweep folder holding it), or a fleet table")
      ->required();
  show->add_flag("--json", opt->json, "Print the table itself (pretty JSON)");
  CLI::App* lk = sub->add_subcommand("lookup", "v1 or v2, and the configuration, for one call");
  lk->add_option("FILE", opt->file,
                 "threshold_table.json (or the sweep folder holding it), or a fleet table")
      ->required();
  lk->add_option("--batch", opt->q.batch, "Sequences in the batch")->check(kPositiveInt);
  lk->add_option("--context-len", opt->q.context_len, "Longest context length")
      ->check(kPositiveInt);
  lk->add_option("--seq-lens", opt->seq_lens,
                 "The batch's context lengths, comma-separated (in place of --batch and "
                 "--context-len; given too, they must be its size and longest): a table with "
                 "batch rules decides for the whole batch");
  lk->add_option("--num-heads", opt->q.num_heads, "Query heads")->required()->check(kPositiveInt);
  lk->add_option("--num-kv-heads", opt->q.num_kv_heads, "KV heads")
      ->required()
      ->check(kPositiveInt);
  lk->add_option("--head-dim", opt->q.head_dim, "Head dimension")->required()->check(kPositiveInt);
  lk->add_option("--block-size", opt->q.block_size, "KV cache block size")
      ->required()
      ->check(kPositiveInt);
  lk->add_option("--dtype", opt->q.dtype,
                 "fp32, fp16 or bf16 (or torch's names: float16, half, ...)")
      ->required();
  lk->add_option("--kv-dtype", opt->q.kv_dtype,
                 "The KV cache's dtype: auto (the --dtype), fp8_e4m3 (fp8) or fp8_e5m2")
      ->capture_default_str();
  lk->add_option("--window-left", opt->q.window_left, "Sliding window (-1: none)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 30));
  lk->add_option("--window-right", opt->q.window_right,
                 "Keys after the query's position it may see (-1: none beyond the causal mask)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 30));
  lk->add_option("--causal", opt->q.causal,
                 "Whether the call is causal (true or false; a profile may sweep both)")
      ->capture_default_str();
  lk->add_option("--softcap", opt->q.softcap, "Logit softcap (0: off)")
      ->capture_default_str()
      ->check(a_number() & CLI::Range(0.0, 1e30));
  lk->add_option("--device", opt->device,
                 "Device to compare the table's with (default: GPU 0, else cpu)");
  lk->add_option("--kernels", opt->kernels,
                 "The kernels you run: a plugin library (PATH.so), a Python module "
                 "(python:MODULE[:FACTORY]), a plugin's name, or attn-tune (built-in); warns "
                 "when the table timed others")
      ->check(named_kernels());
  lk->add_option("--device-name", opt->fleet.device_name,
                 "The device to answer for, by any of its names (\"NVIDIA H100 80GB HBM3\", "
                 "H100-SXM, h100-sxm): picks its entry of a fleet table (default: this "
                 "machine's device); with a single table, notes when it was measured on another");
  lk->add_flag("--nearest", opt->fleet.nearest,
               "With a fleet table that has no entry for the device: use the entry nearest by "
               "SM count and memory bandwidth instead of failing");
  lk->add_option("--sm-count", opt->fleet.sm_count,
                 "With --nearest: the device's SM count, when attn-tune does not know the model")
      ->check(kPositiveInt);
  // CLI11's PositiveNumber lets NaN through (no comparison with it is true).
  const CLI::Validator finite_positive(
      [](const std::string& text) {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        return end != text.c_str() && *end == '\0' && std::isfinite(v) && v > 0
                   ? std::string()
                   : "expected a finite number > 0, got '" + text + "'";
      },
      "POSITIVE");
  lk->add_option("--bandwidth-gbps", opt->fleet.bandwidth_gbps,
                 "With --nearest: the device's memory bandwidth in GB/s, likewise")
      ->check(finite_positive);
  lk->add_flag("--json", opt->json, "Print the choice as JSON");
  CLI::App* comb = sub->add_subcommand(
      "combine", "Join tables of different GPU models into one fleet table keyed by canonical "
                 "device name (docs/sharding.md, section Fleet tables)");
  comb->add_option("OUT", opt->out, "The fleet table to write")->required();
  comb->add_option("TABLE", opt->tables, "Threshold tables (or fleet tables) to join")->required();
  return {sub, [opt, show, comb] {
            if (show->parsed()) {
              return run_table_show(*opt);
            }
            if (comb->parsed()) {
              return run_table_combine(*opt);
            }
            return run_table_lookup(*opt);
          }};
}

} // namespace attn::cli
