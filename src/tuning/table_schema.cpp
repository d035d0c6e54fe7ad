// The schema check of table versions 1 to 5: each field's presence and type, with the field's
// path in the error so a broken table says where it breaks.
#include "src/tuning/table_schema.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "include/attn_tune/threshold_table_reader.hpp"
#include "src/io/json_fields.h"
#include "src/model/errors.h"
#include "src/model/workload.h"
#include "src/tuning/rule_fit.h"

namespace attn {

using nlohmann::json;

namespace {

// Field checks with the path of the field in the error.
struct SchemaCheck {
  [[noreturn]] static void fail(const std::string& path, const std::string& what) {
    throw InputError("threshold table: " + path + ": " + what);
  }
  static const json& field(const json& obj, const std::string& path, const char* key) {
    if (!obj.is_object() || !obj.contains(key)) {
      fail(path.empty() ? key : path + "." + key, "missing");
    }
    return obj[key];
  }
  static std::string sub(const std::string& path, const char* key) {
    return path.empty() ? key : path + "." + key;
  }
  static void str(const json& obj, const std::string& path, const char* key) {
    if (!field(obj, path, key).is_string()) {
      fail(sub(path, key), "expected a string");
    }
  }
  // An integer in [lo, hi] (32 bits at most: nothing a table holds is wider, and a wider value
  // must not wrap on its way to an int).
  static void integer(const json& obj, const std::string& path, const char* key,
                      int64_t lo = INT32_MIN, int64_t hi = INT32_MAX) {
    (void)JsonDoor().integer(field(obj, path, key), "threshold table: " + sub(path, key), lo, hi);
  }
  // A finite number (NaN and infinities are not timings or regrets) of at least `lo`.
  static void number(const json& obj, const std::string& path, const char* key,
                     double lo = -1e300) {
    (void)JsonDoor().number(field(obj, path, key), "threshold table: " + sub(path, key), lo, 1e300);
  }
  static void boolean(const json& obj, const std::string& path, const char* key) {
    if (!field(obj, path, key).is_boolean()) {
      fail(sub(path, key), "expected true or false");
    }
  }
  static const json& object(const json& obj, const std::string& path, const char* key) {
    const json& v = field(obj, path, key);
    if (!v.is_object()) {
      fail(sub(path, key), "expected an object");
    }
    return v;
  }
  static const json& array(const json& obj, const std::string& path, const char* key) {
    const json& v = field(obj, path, key);
    if (!v.is_array()) {
      fail(sub(path, key), "expected a list");
    }
    return v;
  }
  static void shape(const json& p, const std::string& path, bool with_batch = true) {
    str(p, path, "dtype");
    if (p["dtype"] != "fp32" && p["dtype"] != "fp16" && p["dtype"] != "bf16") {
      fail(sub(path, "dtype"),
           "expected \"fp32\", \"fp16\" or \"bf16\", got " + JsonDoor::shown(p["dtype"]));
    }
    if (p.contains("kv_dtype")) { // version 5: the KV cache's dtype where it is fp8
      str(p, path, "kv_dtype");
      if (p["kv_dtype"] != "fp8_e4m3" && p["kv_dtype"] != "fp8_e5m2") {
        fail(sub(path, "kv_dtype"),
             "expected \"fp8_e4m3\" or \"fp8_e5m2\", got " + JsonDoor::shown(p["kv_dtype"]));
      }
    }
    integer(p, path, "head_dim", 1, kMaxHeadDim);
    integer(p, path, "block_size", 1, kMaxBlockSize);
    integer(p, path, "num_kv_heads", 1, kMaxHeads);
    integer(p, path, "gqa_ratio", 1, kMaxHeads);
    integer(p, path, "num_heads", 1, kMaxHeads);
    if (p["num_heads"].get<int>() != p["num_kv_heads"].get<int>() * p["gqa_ratio"].get<int>()) {
      fail(sub(path, "num_heads"), "expected num_kv_heads x gqa_ratio");
    }
    if (with_batch) {
      integer(p, path, "batch", 1, kMaxBatch);
    }
    integer(p, path, "window_left", -1, kMaxContextLen);
    integer(p, path, "window_right", -1, kMaxContextLen);
    boolean(p, path, "causal");
    number(p, path, "softcap", 0.0);
  }
  // Version 4: a batch rule's tree, split nodes down to leaves that name a configuration.
  // `points`: whether the table has decode points for a {"lookup": "points"} leaf to read.
  static void tree(const json& n, const std::string& path, int depth, bool points) {
    if (!n.is_object()) {
      fail(path, "expected a split or a leaf object");
    }
    if (depth > 64) {
      fail(path, "deeper than 64");
    }
    if (n.contains("feature")) {
      const json& f = n["feature"];
      if (f != "batch" && f != "max_len" && f != "sum_len" && f != "mean_len") {
        fail(path + ".feature", "expected \"batch\", \"max_len\", \"sum_len\" or \"mean_len\"");
      }
      number(n, path, "threshold");
      tree(field(n, path, "below"), path + ".below", depth + 1, points);
      tree(field(n, path, "at_or_above"), path + ".at_or_above", depth + 1, points);
      return;
    }
    if (n.contains("lookup")) {
      if (n["lookup"] != "points") {
        fail(path + ".lookup", "expected \"points\"");
      }
      if (!points) {
        fail(path + ".lookup", "the table has no decode points to read");
      }
      return;
    }
    const json& fam = field(n, path, "family");
    if (fam != "decode_v1" && fam != "decode_v2") {
      fail(path + ".family", "expected \"decode_v1\" or \"decode_v2\"");
    }
    config(object(n, path, "config"), path + ".config", fam.get<std::string>());
  }
  // A configuration a lookup returns: `family` (the one it is chosen for, where one is: the
  // readers hold it so), `key`, and `params` of 32-bit integers with a positive `partition`
  // where there is one, as the C++ and Python readers check them.
  static void config(const json& c, const std::string& path, const std::string& family_for) {
    str(c, path, "family");
    if (!family_for.empty() && c["family"] != family_for) {
      fail(path + ".family", "expected \"" + family_for + "\" (the family it is chosen for)");
    }
    const json& params = object(c, path, "params");
    for (const auto& [name, v] : params.items()) {
      integer(params, path + ".params", name.c_str());
    }
    if (params.contains("partition")) {
      integer(params, path + ".params", "partition", 1);
    }
    str(c, path, "key");
  }
  static void timed(const json& t, const std::string& path, const std::string& family_for) {
    if (!t.is_object()) {
      fail(path, "expected an object with config and median_s");
    }
    config(object(t, path, "config"), path + ".config", family_for);
    number(t, path, "median_s", 0.0);
  }
  static void optional_number(const json& obj, const std::string& path, const char* key) {
    if (obj.contains(key)) {
      number(obj, path, key);
    }
  }
  static void entry(const json& m, const std::string& path, int version) {
    integer(m, path, "context_len", 1, kMaxContextLen);
    timed(field(m, path, "best"), path + ".best", "");
    for (const char* slot : {"v1", "v2"}) {
      const json& v = field(m, path, slot);
      if (!v.is_null()) {
        timed(v, sub(path, slot), std::string("decode_") + slot);
      }
    }
    if (version >= 2) {
      boolean(m, path, "within_noise");
      optional_number(m, path, "margin");
      optional_number(m, path, "noise");
      // The margin compares the two families' medians: the writer gives it (and the noise)
      // only where both were timed, and the readers that print it read both.
      if ((m.contains("margin") || m.contains("noise")) &&
          (m["v1"].is_null() || m["v2"].is_null())) {
        fail(path + (m.contains("margin") ? ".margin" : ".noise"),
             "given where v1 or v2 was not timed (the margin compares the two)");
      }
    }
  }
  static bool is_v2_from(const json& f) {
    return (f.is_number_integer() && f.get<int64_t>() >= 1 && f.get<int64_t>() <= kMaxContextLen &&
            !(f.is_number_unsigned() && f.get<uint64_t>() > uint64_t(kMaxContextLen))) ||
           f == "always" || f == "never";
  }
  // [[from, to or null], ...]: from >= 1, from < to, ascending and apart, only the last open.
  static std::vector<std::pair<int, std::optional<int>>> intervals(const json& p,
                                                                   const std::string& path) {
    const json& ivs = array(p, path, "v2_intervals");
    std::vector<std::pair<int, std::optional<int>>> out;
    for (std::size_t k = 0; k < ivs.size(); ++k) {
      const std::string ip = path + ".v2_intervals[" + std::to_string(k) + "]";
      const json& iv = ivs[k];
      const auto is_length = [](const json& v) {
        return v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= kMaxContextLen &&
               !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(kMaxContextLen));
      };
      if (!iv.is_array() || iv.size() != 2 || !is_length(iv[0]) ||
          !(is_length(iv[1]) || iv[1].is_null())) {
        fail(ip, "expected [from, to] with a context length from and a context length or null to");
      }
      const int from = iv[0].get<int>();
      const std::optional<int> to =
          iv[1].is_null() ? std::nullopt : std::optional(iv[1].get<int>());
      if (from < 1 || (to && *to <= from)) {
        fail(ip, "expected 1 <= from < to");
      }
      if (!out.empty() && (!out.back().second || *out.back().second >= from)) {
        fail(ip, "intervals must be ascending, apart, and only the last may be open");
      }
      out.emplace_back(from, to);
    }
    return out;
  }
  static void family(const json& obj, const std::string& path, const char* key) {
    const json& v = field(obj, path, key);
    if (v != "v1" && v != "v2") {
      fail(sub(path, key), "expected \"v1\" or \"v2\"");
    }
  }
  static void int_or_null(const json& obj, const std::string& path, const char* key) {
    const json& v = field(obj, path, key);
    if (!v.is_null()) {
      integer(obj, path, key, 1, kMaxContextLen);
    }
  }
  // Optional since tables made before it lack it: each entry names a measured length whose
  // comparison was within noise.
  static void noisy_decisions(const json& p, const std::string& path) {
    if (!p.contains("noisy_decisions")) {
      return;
    }
    const json& list = array(p, path, "noisy_decisions");
    const json& measured = array(p, path, "measured");
    for (std::size_t k = 0; k < list.size(); ++k) {
      const std::string np = path + ".noisy_decisions[" + std::to_string(k) + "]";
      const json& n = list[k];
      integer(n, np, "context_len", 1, kMaxContextLen);
      family(n, np, "decision");
      family(n, np, "faster");
      number(n, np, "margin");
      number(n, np, "noise");
      int_or_null(n, np, "carried_from");
      int_or_null(n, np, "switch_at");
      if (n.contains("remeasured")) {
        boolean(n, np, "remeasured");
      }
      if (n.contains("hides_switch")) {
        boolean(n, np, "hides_switch");
      }
      const bool listed = std::any_of(measured.begin(), measured.end(), [&](const json& m) {
        return m.is_object() && m.value("context_len", -1) == n["context_len"] &&
               m.value("within_noise", false);
      });
      if (!listed) {
        fail(np + ".context_len", "not a measured length within noise");
      }
    }
  }
  // Version 2: `v2_intervals`, and `v2_from` where present must say the same.
  static void decision(const json& p, const std::string& path) {
    const auto ivs = intervals(p, path);
    if (!p.contains("v2_from")) {
      return;
    }
    const json& f = p["v2_from"];
    if (!is_v2_from(f)) {
      fail(path + ".v2_from", "expected a context length, \"always\" or \"never\"");
    }
    const bool single = ivs.size() == 1 && !ivs.front().second;
    const bool agrees = f == "never"    ? ivs.empty()
                        : f == "always" ? single && ivs.front().first == 1
                                        : single && ivs.front().first == f.get<int>();
    if (!agrees) {
      fail(path + ".v2_from", "does not match v2_intervals");
    }
  }
};

} // namespace

void validate_table(const nlohmann::json& t) {
  using S = SchemaCheck;
  if (!t.is_object()) {
    S::fail("(top level)", "expected an object");
  }
  if (!t.contains("schema") || t["schema"] != attn_tune::kTableSchemaName) {
    S::fail("schema", std::string("expected \"") + attn_tune::kTableSchemaName + "\"");
  }
  if (!t.contains("version") || !t["version"].is_number_integer() ||
      t["version"].get<int64_t>() < attn_tune::kOldestTableSchemaVersion ||
      t["version"].get<int64_t>() > attn_tune::kTableSchemaVersion) {
    S::fail("version", "expected " + std::to_string(attn_tune::kOldestTableSchemaVersion) + " to " +
                           std::to_string(attn_tune::kTableSchemaVersion) + ", got " +
                           (t.contains("version") ? JsonDoor::shown(t["version"]) : "none"));
  }
  const int version = t["version"].get<int>();
  const json& pv = S::object(t, "", "provenance");
  const json& dev = S::object(pv, "provenance", "device");
  S::str(dev, "provenance.device", "name");
  const json& tool = S::object(pv, "provenance", "tool");
  S::str(tool, "provenance.tool", "version");
  S::str(tool, "provenance.tool", "git_hash");
  S::str(pv, "provenance", "kernel_sources_sha256");
  if (pv.contains("kernels")) { // tables from before plugins timed the built-in kernels
    const json& k = S::object(pv, "provenance", "kernels");
    S::str(k, "provenance.kernels", "source");
    S::str(k, "provenance.kernels", "name");
    if (k["source"] == "plugin") {
      S::str(k, "provenance.kernels", "version");
      S::str(k, "provenance.kernels", "library_sha256");
      S::integer(k, "provenance.kernels", "abi_version");
    }
    if (k.contains("engine_rule")) { // tables made before kernel sets named their rule lack it
      S::str(k, "provenance.kernels", "engine_rule");
    }
  }
  const json& prof = S::object(pv, "provenance", "profile");
  S::str(prof, "provenance.profile", "name");
  S::str(prof, "provenance.profile", "hash");
  S::str(pv, "provenance", "created_utc");
  S::str(pv, "provenance", "timing_method");
  const json& counts = S::object(t, "", "measurement_counts");
  for (const char* k : {"ok", "failed", "skipped", "error"}) {
    S::integer(counts, "measurement_counts", k, 0);
  }
  const json& decode = S::array(t, "", "decode");
  for (std::size_t i = 0; i < decode.size(); ++i) {
    const std::string path = "decode[" + std::to_string(i) + "]";
    const json& p = decode[i];
    S::shape(p, path);
    if (version >= 2) {
      S::decision(p, path);
    } else if (!S::is_v2_from(S::field(p, path, "v2_from"))) {
      S::fail(path + ".v2_from", "expected a context length, \"always\" or \"never\"");
    }
    const json& measured = S::array(p, path, "measured");
    if (measured.empty()) {
      S::fail(path + ".measured", "expected at least one measured context length");
    }
    for (std::size_t k = 0; k < measured.size(); ++k) {
      S::entry(measured[k], path + ".measured[" + std::to_string(k) + "]", version);
    }
    if (version >= 2) {
      S::noisy_decisions(p, path);
    }
  }
  const json& prefill = S::array(t, "", "prefill");
  for (std::size_t i = 0; i < prefill.size(); ++i) {
    const std::string path = "prefill[" + std::to_string(i) + "]";
    S::shape(prefill[i], path);
    S::integer(prefill[i], path, "q_len", 1, kMaxContextLen);
    S::integer(prefill[i], path, "k_len", 1, kMaxContextLen);
    S::timed(S::field(prefill[i], path, "best"), path + ".best", "prefill");
  }
  const json& held = S::array(t, "", "held_out");
  for (std::size_t i = 0; i < held.size(); ++i) {
    const std::string path = "held_out[" + std::to_string(i) + "]";
    S::shape(held[i], path);
    S::entry(held[i], path, version);
  }
  const json& rule = S::object(t, "", "rule");
  S::str(rule, "rule", "tiles");
  S::number(rule, "rule", "k");
  // Version 3: null where the fitted rule's v2 chooses its own splits.
  if (version < 3 || !S::field(rule, "rule", "partition").is_null()) {
    S::integer(rule, "rule", "partition");
    if (rule["partition"].get<int>() < 1) {
      S::fail("rule.partition", "expected a positive partition size");
    }
  }
  S::integer(rule, "rule", "sm_count", 0);
  S::integer(rule, "rule", "points", 0);
  if (version >= 3) { // the tiles definition must go with the partition (or its absence)
    try {
      (void)RuleFit::from_json(rule);
    } catch (const InputError& e) {
      throw InputError(std::string("threshold table: ") + e.what());
    }
  }
  if (version >= 4 && t.contains("batches")) {
    const json& batches = S::array(t, "", "batches");
    for (std::size_t i = 0; i < batches.size(); ++i) {
      const std::string path = "batches[" + std::to_string(i) + "]";
      const json& b = batches[i];
      S::shape(b, path);
      const json& lens = S::array(b, path, "seq_lens");
      if (lens.empty() || lens.size() > std::size_t(kMaxBatch)) {
        S::fail(path + ".seq_lens", "expected 1 to " + std::to_string(kMaxBatch) + " context lengths");
      }
      for (std::size_t k = 0; k < lens.size(); ++k) {
        (void)JsonDoor().integer(lens[k], "threshold table: " + path + ".seq_lens[" + std::to_string(k) + "]", 1,
                                 kMaxContextLen);
      }
      S::number(b, path, "weight", 0.0);
      S::boolean(b, path, "held_out");
      S::entry(b, path, version);
    }
  }
  if (version >= 4 && t.contains("batch_rules")) {
    const json& rules = S::array(t, "", "batch_rules");
    for (std::size_t i = 0; i < rules.size(); ++i) {
      const std::string path = "batch_rules[" + std::to_string(i) + "]";
      S::shape(rules[i], path, /*with_batch=*/false);
      S::integer(rules[i], path, "batches", 0);
      S::tree(S::field(rules[i], path, "tree"), path + ".tree", 0, !decode.empty());
    }
  }
  const json& regret = S::object(t, "", "regret");
  if (version >= 4 && regret.contains("traffic")) {
    const json& traffic = S::object(regret, "regret", "traffic");
    for (const char* set : {"sweep", "held_out"}) {
      const std::string sp = std::string("regret.traffic.") + set;
      const json& r = S::object(traffic, "regret.traffic", set);
      for (const auto& [rn, x] : r.items()) {
        const std::string path = sp + "." + rn;
        if (!x.is_object()) {
          S::fail(path, "expected an object");
        }
        for (const char* k : {"regret", "total_s", "best_s", "mean", "p90", "worst", "weight"}) {
          S::number(x, path, k);
        }
        S::integer(x, path, "batches", 0);
      }
    }
  }
  for (const char* set : {"sweep", "held_out"}) {
    const json& r = S::object(regret, "regret", set);
    // The rules every table of its version prices: what the schema promises readers, so a rule
    // added to engine_rules() later is not required of the tables written before it. Version 3
    // renamed vLLM's CUDA rule from "vllm" (it is not every vLLM's) and added vLLM CPU's.
    const std::vector<const char*> rules =
        version >= 3
            ? std::vector<const char*>{"fitted_rule", "table_lookup", "vllm_cuda", "vllm_cpu",
                                       "seed_engine"}
            : std::vector<const char*>{"fitted_rule", "table_lookup", "vllm", "seed_engine"};
    for (const char* rn : rules) {
      const std::string path = std::string("regret.") + set;
      const json& x = S::object(r, path, rn);
      S::number(x, path + "." + rn, "mean");
      S::number(x, path + "." + rn, "worst");
      S::integer(x, path + "." + rn, "points");
      if (version >= 2) {
        S::integer(x, path + "." + rn, "beyond_noise");
      }
    }
  }
}

} // namespace attn
