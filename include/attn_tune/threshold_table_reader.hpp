// Header-only reader of attn-tune threshold tables (docs/threshold-table.md): an engine includes
// this file (it needs only nlohmann/json) to pick decode v1 or v2 and its configuration.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace attn_tune {

// The version attn-tune writes, and the oldest one readers still read (version 1 has `v2_from`
// only; version 2 adds `v2_intervals` and the noise fields; version 3 prices vLLM's CUDA rule as
// `vllm_cuda`, adds vLLM CPU's, and lets a decode_v2 have no partition: the kernel chooses its
// splits; version 4 adds `batch_rules`, decisions for a whole decode batch from the lengths of
// its sequences; version 5 adds `kv_dtype` to points and rules whose KV cache is fp8). Lookups
// read them the same way from version 2 on; a point without `kv_dtype` has a cache of its dtype.
inline constexpr int kTableSchemaVersion = 5;
inline constexpr int kOldestTableSchemaVersion = 1;
inline constexpr const char* kTableSchemaName = "attn-tune/threshold-table";
// Distance penalty for a differing dtype (the query's or the KV cache's: one penalty for either)
// or mask: larger than any realistic sum of log2 ratios, so the nearest point always shares
// dtypes and mask when the table has one that does.
inline constexpr double kCategoryPenalty = 64.0;
// Distances closer than this count as ties, broken by table order (so readers agree exactly).
inline constexpr double kTieEpsilon = 1e-9;

// One decode call as an engine sees it.
struct Query {
  int batch = 1;
  int context_len = 1;
  int num_heads = 1;
  int num_kv_heads = 1;
  int head_dim = 128;
  int block_size = 16;
  std::string dtype = "fp16"; // "fp32", "fp16" or "bf16"
  // The KV cache's dtype: "auto" (or "" or dtype itself: the cache has dtype), "fp8_e4m3"
  // ("fp8", as vLLM's kv_cache_dtype names it) or "fp8_e5m2".
  std::string kv_dtype = "auto";
  bool causal = true;
  int window_left = -1;
  int window_right = -1;
  double softcap = 0.0;
  // A whole decode batch's context lengths (optional). Given, a table with `batch_rules`
  // decides for the batch by its features (batch, max_len, sum_len, mean_len); otherwise batch
  // and context_len are taken from it (its size and longest length).
  std::vector<int> seq_lens;
};

// What an engine knows about a decode batch at dispatch time, as `batch_rules` trees split on it.
struct BatchFeatures {
  double batch = 0.0;    // sequences
  double max_len = 0.0;  // longest context
  double sum_len = 0.0;  // all contexts together
  double mean_len = 0.0; // sum_len / batch
  // The feature a tree node names; throws on an unknown name.
  [[nodiscard]] double get(const std::string& name) const {
    if (name == "batch") {
      return batch;
    }
    if (name == "max_len") {
      return max_len;
    }
    if (name == "sum_len") {
      return sum_len;
    }
    if (name == "mean_len") {
      return mean_len;
    }
    throw std::runtime_error("unknown batch feature '" + name + "'");
  }
  [[nodiscard]] static BatchFeatures of(const std::vector<int>& lens) {
    BatchFeatures f;
    f.batch = double(lens.size());
    for (int v : lens) {
      f.max_len = std::max(f.max_len, double(v));
      f.sum_len += double(v);
    }
    f.mean_len = lens.empty() ? 0.0 : f.sum_len / f.batch;
    return f;
  }
};

// The leaf of a `batch_rules` tree a batch reaches: a split node sends it to "below" when its
// feature is under the threshold, else to "at_or_above". `path` (optional) gets the splits taken,
// "max_len >= 4096, mean_len < 900".
inline const nlohmann::json& batch_tree_leaf(const nlohmann::json& node, const BatchFeatures& f,
                                             std::string* path = nullptr) {
  const nlohmann::json* n = &node;
  for (int depth = 0; n->contains("feature"); ++depth) {
    if (depth > 64) {
      throw std::runtime_error("batch rule tree deeper than 64");
    }
    const std::string feature = n->at("feature").get<std::string>();
    const double threshold = n->at("threshold").get<double>();
    const bool below = f.get(feature) < threshold;
    if (path != nullptr) {
      std::ostringstream s;
      s << (path->empty() ? "" : ", ") << feature << (below ? " < " : " >= ") << threshold;
      *path += s.str();
    }
    n = &n->at(below ? "below" : "at_or_above");
  }
  return *n;
}

struct Choice {
  std::string family;     // "decode_v1" or "decode_v2"
  nlohmann::json config;  // {"family": ..., "params": {...}, "key": "..."}
  std::string config_key; // "decode_v2[partition=512]"
  // decode_v2: the keys per partition its configuration launches with, 0 where it has no
  // "partition" (the kernel chooses its splits); 0 for decode_v1.
  int partition = 0;
  bool exact_point = false; // the table has a point with exactly the query's shape and mask
  double distance = 0.0;    // the nearest point's distance (0 for an exact point)
  int measured_context = 0; // the context length whose best configuration was taken
  nlohmann::json point;     // the table point used (without its measurements), or batch rule
  // From a `batch_rules` tree (a query with seq_lens): the splits the batch took to its leaf,
  // ending "decode points" where that leaf defers to them (the rest of the Choice is then theirs).
  bool batch_rule = false;
  std::string batch_path;
  // The batch rule whose tree the batch went down (without its tree) and its distance from the
  // query's shape; where its leaf defers to the decode points, `point` and `distance` are the
  // decode point's, and these still say whether the rule had the query's shape.
  nlohmann::json rule;
  double rule_distance = 0.0;
  // v2 whose kernel chooses its own splits: launch it without a partition.
  [[nodiscard]] bool kernel_chooses_splits() const {
    return family == "decode_v2" && partition == 0;
  }
};

class ThresholdTableReader {
public:
  explicit ThresholdTableReader(nlohmann::json table) : t_(std::move(table)) {
    if (!t_.is_object() || !t_.contains("schema") || t_["schema"] != kTableSchemaName) {
      throw std::runtime_error("not an attn-tune threshold table (schema is not \"" +
                               std::string(kTableSchemaName) + "\")");
    }
    if (!t_.contains("version") || !t_["version"].is_number_integer()) {
      throw std::runtime_error("threshold table has no integer 'version'");
    }
    if (!int_within(t_["version"], kOldestTableSchemaVersion, kTableSchemaVersion)) {
      // Named as written: narrowed to an int first, 2^40 + 5 would have read as version 5.
      throw std::runtime_error("unsupported threshold table version " + t_["version"].dump() +
                               " (this reader reads versions " +
                               std::to_string(kOldestTableSchemaVersion) + " to " +
                               std::to_string(kTableSchemaVersion) + ")");
    }
    version_ = t_["version"].get<int>();
    if (!t_.contains("decode") || !t_["decode"].is_array()) {
      throw std::runtime_error("threshold table has no 'decode' list");
    }
    for (std::size_t i = 0; i < t_["decode"].size(); ++i) {
      check_point(t_["decode"][i], "decode[" + std::to_string(i) + "]", version_);
    }
    if (version_ >= 4 && t_.contains("batch_rules")) {
      if (!t_["batch_rules"].is_array()) {
        throw std::runtime_error("threshold table: batch_rules: expected a list");
      }
      for (std::size_t i = 0; i < t_["batch_rules"].size(); ++i) {
        check_rule(t_["batch_rules"][i], "batch_rules[" + std::to_string(i) + "]",
                   !t_["decode"].empty());
      }
    }
    // Each decode point under its exact shape: a lookup of a measured shape is one hash lookup,
    // not a pass over every point, so many lookups in a big table (a report, an engine's
    // warm-up) stay linear. attn-tune writes one point per shape; two (a hand edit, or tables
    // pasted together) would answer by their order in the file, so they are refused.
    const nlohmann::json& pts = t_["decode"];
    for (std::size_t i = 0; i < pts.size(); ++i) {
      const nlohmann::json& p = pts[i]; // its shape checked above
      const auto [at, added] =
          exact_.emplace(exact_key(p.at("batch").get<double>(), p.at("num_kv_heads").get<double>(),
                                   p.at("gqa_ratio").get<double>(), p.at("head_dim").get<double>(),
                                   p.at("block_size").get<double>(), dtypes_of(p),
                                   p.at("causal").get<bool>(), p.at("window_left").get<int>(),
                                   p.at("window_right").get<int>(), p.at("softcap").get<double>()),
                         i);
      if (!added) {
        throw std::runtime_error("threshold table: decode[" + std::to_string(i) +
                                 "]: the shape and mask of decode[" + std::to_string(at->second) +
                                 "] again (one point per shape; which one is meant?)");
      }
    }
  }

  // Whether v is an integer in [lo, hi], read without narrowing (an unsigned past int64's range
  // and a signed one alike).
  [[nodiscard]] static bool int_within(const nlohmann::json& v, int64_t lo, int64_t hi) {
    if (v.is_number_unsigned()) {
      return lo <= 0 ? v.get<uint64_t>() <= uint64_t(hi)
                     : v.get<uint64_t>() >= uint64_t(lo) && v.get<uint64_t>() <= uint64_t(hi);
    }
    return v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  }

  // A decode point's or a batch rule's shape (heads, head_dim, block_size, dtypes) and mask, as
  // the lookup compares them with a query's.
  static void check_shape_and_mask(const nlohmann::json& p, const std::string& path) {
    const auto fail = [&](const std::string& field, const std::string& what) {
      throw std::runtime_error("threshold table: " + path + (field.empty() ? "" : ".") + field +
                               ": " + what);
    };
    constexpr int64_t kIntMax = 2147483647;
    if (!p.is_object()) {
      fail("", "expected an object");
    }
    for (const char* key : {"num_heads", "num_kv_heads", "gqa_ratio", "head_dim", "block_size"}) {
      if (!p.contains(key) || !int_within(p[key], 1, kIntMax)) {
        fail(key, "expected a positive integer");
      }
    }
    if (p["num_heads"].get<int64_t>() !=
        p["num_kv_heads"].get<int64_t>() * p["gqa_ratio"].get<int64_t>()) {
      fail("num_heads", "expected num_kv_heads x gqa_ratio");
    }
    if (!p.contains("dtype") ||
        !(p["dtype"] == "fp32" || p["dtype"] == "fp16" || p["dtype"] == "bf16")) {
      fail("dtype", "expected \"fp32\", \"fp16\" or \"bf16\"");
    }
    if (p.contains("kv_dtype") && !(p["kv_dtype"] == "fp8_e4m3" || p["kv_dtype"] == "fp8_e5m2")) {
      fail("kv_dtype", "expected \"fp8_e4m3\" or \"fp8_e5m2\"");
    }
    if (!p.contains("causal") || !p["causal"].is_boolean()) {
      fail("causal", "expected true or false");
    }
    for (const char* key : {"window_left", "window_right"}) {
      if (!p.contains(key) || !int_within(p[key], -1, kIntMax)) {
        fail(key, "expected -1 or a length");
      }
    }
    if (!p.contains("softcap") || !p["softcap"].is_number() || !(p["softcap"].get<double>() >= 0)) {
      fail("softcap", "expected a number >= 0");
    }
  }

  // A decode point's fields the lookup reads, held as attn-tune's own check holds them (and the
  // Python reader): std::runtime_error "threshold table: PATH.FIELD: what", so that a damaged
  // table is refused rather than answered from.
  static void check_point(const nlohmann::json& p, const std::string& path, int version) {
    const auto fail = [&](const std::string& field, const std::string& what) {
      throw std::runtime_error("threshold table: " + path + (field.empty() ? "" : ".") + field +
                               ": " + what);
    };
    // Every integer the lookup reads as an int is one: 2^32 + 256 is no window of 256.
    constexpr int64_t kIntMax = 2147483647;
    const auto positive = [](const nlohmann::json& v) { return int_within(v, 1, kIntMax); };
    if (p.is_object() && (!p.contains("batch") || !positive(p["batch"]))) {
      fail("batch", "expected a positive integer");
    }
    check_shape_and_mask(p, path);
    if (version >= 2) {
      if (!p.contains("v2_intervals") || !p["v2_intervals"].is_array()) {
        fail("v2_intervals", "expected a list");
      }
      // Ascending and apart (a run that ends where the next begins is one run), as attn-tune's
      // schema check holds them.
      int64_t end = 0;
      const nlohmann::json& ivs = p["v2_intervals"];
      for (std::size_t k = 0; k < ivs.size(); ++k) {
        const std::string f = "v2_intervals[" + std::to_string(k) + "]";
        const nlohmann::json& iv = ivs[k];
        if (!iv.is_array() || iv.size() != 2 || !positive(iv[0]) || iv[0].get<int64_t>() <= end) {
          fail(f, "expected [from, to] starting at 1 or later, after the interval before");
        }
        if (!iv[1].is_null() &&
            (!positive(iv[1]) || iv[1].get<int64_t>() <= iv[0].get<int64_t>())) {
          fail(f, "expected an end after its start, or null");
        }
        if (iv[1].is_null() && k + 1 < ivs.size()) {
          fail(f, "an open interval must be the last");
        }
        end = iv[1].is_null() ? iv[0].get<int64_t>() : iv[1].get<int64_t>();
      }
      // Version 2 on writes `v2_from` only where it says what the intervals say; a table where
      // the two disagree has been edited by hand, and which one is meant is unknown.
      if (p.contains("v2_from")) {
        const nlohmann::json& f = p["v2_from"];
        const bool single = ivs.size() == 1 && ivs[0][1].is_null();
        const bool agrees = f == "never"    ? ivs.empty()
                            : f == "always" ? single && ivs[0][0] == 1
                                            : positive(f) && single && ivs[0][0] == f;
        if (!agrees) {
          fail("v2_from", "does not match v2_intervals");
        }
      }
    } else if (!p.contains("v2_from") ||
               !(positive(p["v2_from"]) || p["v2_from"] == "always" || p["v2_from"] == "never")) {
      fail("v2_from", "expected a context length, \"always\" or \"never\"");
    }
    if (!p.contains("measured") || !p["measured"].is_array() || p["measured"].empty()) {
      fail("measured", "expected at least one measured context length");
    }
    for (std::size_t k = 0; k < p["measured"].size(); ++k) {
      const nlohmann::json& m = p["measured"][k];
      const std::string where = "measured[" + std::to_string(k) + "]";
      if (!m.is_object() || !m.contains("context_len") || !positive(m["context_len"])) {
        fail(where + ".context_len", "expected a positive integer");
      }
      for (const char* slot : {"v1", "v2"}) {
        if (m.contains(slot) && !m[slot].is_null()) {
          if (!m[slot].is_object() || !m[slot].contains("config")) {
            fail(where + "." + slot, "expected an object with a config, or null");
          }
          check_config(m[slot]["config"], path + "." + where + "." + slot + ".config",
                       slot == std::string("v1") ? "decode_v1" : "decode_v2");
        }
      }
    }
  }

  // A configuration a lookup returns: a string `key`, `params` of 32-bit integers (what every
  // kernel set declares) with a positive `partition` where there is one, and `family` (where
  // written) the family it stands for: a damaged one is refused, not launched.
  static void check_config(const nlohmann::json& c, const std::string& path, const char* family) {
    const auto fail = [&](const std::string& field, const std::string& what) {
      throw std::runtime_error("threshold table: " + path + (field.empty() ? "" : ".") + field +
                               ": " + what);
    };
    if (!c.is_object()) {
      fail("", "expected an object");
    }
    if (!c.contains("key") || !c["key"].is_string()) {
      fail("key", "expected a string");
    }
    if (!c.contains("params") || !c["params"].is_object()) {
      fail("params", "expected an object");
    }
    for (const auto& [name, v] : c["params"].items()) {
      if (!int_within(v, -2147483648LL, 2147483647LL)) {
        fail("params." + name, "expected a 32-bit integer");
      }
    }
    if (c["params"].contains("partition") &&
        !int_within(c["params"]["partition"], 1, 2147483647LL)) {
      fail("params.partition", "expected a positive integer");
    }
    if (c.contains("family") && c["family"] != family) {
      fail("family", std::string("expected \"") + family + "\" (the family it is chosen for)");
    }
  }

  // A `batch_rules` entry (version 4) as attn-tune's own check and the Python reader hold it: a
  // shape without `batch`, `batches`, and a tree of splits down to leaves that name a
  // configuration or defer to the decode points (`points`: whether there are any).
  static void check_rule(const nlohmann::json& r, const std::string& path, bool points) {
    const auto fail = [&](const std::string& field, const std::string& what) {
      throw std::runtime_error("threshold table: " + path + (field.empty() ? "" : ".") + field +
                               ": " + what);
    };
    check_shape_and_mask(r, path);
    if (!r.contains("batches") || !int_within(r["batches"], 0, 2147483647LL)) {
      fail("batches", "expected a count");
    }
    if (!r.contains("tree")) {
      fail("tree", "missing");
    }
    check_tree(r["tree"], path + ".tree", 0, points);
  }
  static void check_tree(const nlohmann::json& n, const std::string& path, int depth, bool points) {
    const auto fail = [&](const std::string& field, const std::string& what) {
      throw std::runtime_error("threshold table: " + path + (field.empty() ? "" : ".") + field +
                               ": " + what);
    };
    if (!n.is_object()) {
      fail("", "expected a split or a leaf object");
    }
    if (depth > 64) {
      fail("", "deeper than 64");
    }
    if (n.contains("feature")) {
      const nlohmann::json& f = n["feature"];
      if (f != "batch" && f != "max_len" && f != "sum_len" && f != "mean_len") {
        fail("feature", "expected \"batch\", \"max_len\", \"sum_len\" or \"mean_len\"");
      }
      if (!n.contains("threshold") || !n["threshold"].is_number()) {
        fail("threshold", "expected a number");
      }
      for (const char* side : {"below", "at_or_above"}) {
        if (!n.contains(side)) {
          fail(side, "missing");
        }
        check_tree(n[side], path + "." + side, depth + 1, points);
      }
      return;
    }
    if (n.contains("lookup")) {
      if (n["lookup"] != "points") {
        fail("lookup", "expected \"points\"");
      }
      if (!points) {
        fail("lookup", "the table has no decode points to read");
      }
      return;
    }
    if (!n.contains("family") || !(n["family"] == "decode_v1" || n["family"] == "decode_v2")) {
      fail("family", "expected \"decode_v1\" or \"decode_v2\"");
    }
    if (!n.contains("config")) {
      fail("config", "missing");
    }
    check_config(n["config"], path + ".config",
                 n["family"] == "decode_v1" ? "decode_v1" : "decode_v2");
  }

  static ThresholdTableReader from_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) {
      throw std::runtime_error("cannot read threshold table '" + path + "'");
    }
    // nlohmann/json parses any depth, but copies and compares recursively: a file of 100,000
    // nested brackets would overflow the stack. No table nests past a dozen levels.
    const auto bounded = [](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
      if (depth > 200 && (event == nlohmann::json::parse_event_t::object_start ||
                          event == nlohmann::json::parse_event_t::array_start)) {
        throw std::runtime_error("threshold table nested deeper than 200 levels");
      }
      return true;
    };
    return ThresholdTableReader(nlohmann::json::parse(f, bounded));
  }

  [[nodiscard]] const nlohmann::json& json() const { return t_; }
  [[nodiscard]] int version() const { return version_; }
  [[nodiscard]] const nlohmann::json& provenance() const { return t_.at("provenance"); }
  // The name of the kernels the table timed: a plugin's name, or "attn-tune" for the built-in
  // kernels (also for tables made before plugins existed). Thresholds hold for those kernels only.
  [[nodiscard]] std::string kernels_name() const {
    const nlohmann::json& pv = provenance();
    if (!pv.contains("kernels") || pv["kernels"].value("source", "") != "plugin") {
      return "attn-tune";
    }
    return pv["kernels"].value("name", "");
  }
  // The engine rule those kernels replace ("vllm-cuda", "vllm-cpu", "seed"), which the table's
  // regret names as the kernel set's own rule; "" where they name none (and in tables made
  // before kernel sets named one).
  [[nodiscard]] std::string engine_rule() const {
    const nlohmann::json& pv = provenance();
    if (!pv.contains("kernels") || !pv["kernels"].is_object()) {
      return "";
    }
    const nlohmann::json& k = pv["kernels"];
    return k.contains("engine_rule") && k["engine_rule"].is_string()
               ? k["engine_rule"].get<std::string>()
               : "";
  }

  // Distance between a table point and a query (docs/threshold-table.md "Lookup").
  [[nodiscard]] static double distance(const nlohmann::json& p, const Query& q) {
    return std::fabs(std::log2(p.at("batch").get<double>()) - std::log2(double(q.batch))) +
           shape_distance(p, q);
  }
  // The same without the batch term: the distance of a batch rule, which covers every batch.
  [[nodiscard]] static double shape_distance(const nlohmann::json& p, const Query& q) {
    auto lr = [](double a, double b) { return std::fabs(std::log2(a) - std::log2(b)); };
    const double gqa_q = double(q.num_heads) / double(q.num_kv_heads);
    double d = lr(p.at("num_kv_heads").get<double>(), q.num_kv_heads) +
               lr(p.at("gqa_ratio").get<double>(), gqa_q) +
               lr(p.at("head_dim").get<double>(), q.head_dim) +
               lr(p.at("block_size").get<double>(), q.block_size);
    if (dtypes_of(p) != dtypes_of(q)) {
      d += kCategoryPenalty;
    }
    if (p.at("causal").get<bool>() != q.causal || p.at("window_left").get<int>() != q.window_left ||
        p.at("window_right").get<int>() != q.window_right ||
        p.at("softcap").get<double>() != q.softcap) {
      d += kCategoryPenalty;
    }
    return d;
  }

  // Whether a decode point of a table of `version` chooses v2 at `context_len`: from
  // `v2_intervals` ([from, to) pairs, `to` null for no end) in version 2, from `v2_from` in 1.
  [[nodiscard]] static bool uses_v2(const nlohmann::json& p, int version, int context_len) {
    if (version >= 2) {
      for (const auto& iv : p.at("v2_intervals")) {
        if (context_len >= iv.at(0).get<int>() &&
            (iv.at(1).is_null() || context_len < iv.at(1).get<int>())) {
          return true;
        }
      }
      return false;
    }
    const nlohmann::json& from = p.at("v2_from");
    if (from.is_string()) {
      return from.get<std::string>() == "always";
    }
    return context_len >= from.get<int>();
  }

  // Whether the table decides whole batches (version 4 with `batch_rules`).
  [[nodiscard]] bool has_batch_rules() const {
    return version_ >= 4 && t_.contains("batch_rules") && t_["batch_rules"].is_array() &&
           !t_["batch_rules"].empty();
  }

  // The KV cache's dtype of a point or batch rule (`kv_dtype`, else its dtype) and of a query.
  [[nodiscard]] static std::string cache_dtype_of(const nlohmann::json& p) {
    const auto it = p.find("kv_dtype");
    return it != p.end() && it->is_string() && *it != "auto" ? it->get<std::string>()
                                                             : p.at("dtype").get<std::string>();
  }
  [[nodiscard]] static std::string cache_dtype_of(const Query& q) {
    return canonical_kv_dtype(q.kv_dtype, canonical_dtype(q.dtype));
  }
  // A query dtype by the name tables use ("fp32", "fp16", "bf16"), from any name `attn-tune
  // table lookup --dtype` and the Python reader accept (half, float16, bfloat16, torch.float16,
  // ...); std::invalid_argument for others.
  [[nodiscard]] static std::string canonical_dtype(const std::string& name) {
    std::string n = name.rfind("torch.", 0) == 0 ? name.substr(6) : name;
    if (n == "fp32" || n == "float32" || n == "f32" || n == "float") {
      return "fp32";
    }
    if (n == "fp16" || n == "float16" || n == "f16" || n == "half") {
      return "fp16";
    }
    if (n == "bf16" || n == "bfloat16") {
      return "bf16";
    }
    throw std::invalid_argument("unknown dtype '" + name + "' (expected fp32, fp16 or bf16)");
  }
  // A KV cache's dtype by the name tables use: the query's (`dtype`, canonical) for "auto", ""
  // or the query's own name, else "fp8_e4m3" or "fp8_e5m2" from vLLM's and torch's names;
  // std::invalid_argument for others (a 16-bit cache of another dtype than the query's too).
  [[nodiscard]] static std::string canonical_kv_dtype(const std::string& name,
                                                      const std::string& dtype) {
    std::string n = name.rfind("torch.", 0) == 0 ? name.substr(6) : name;
    if (n.empty() || n == "auto") {
      return dtype;
    }
    if (n == "fp8" || n == "fp8_e4m3" || n == "e4m3" || n == "fp8_e4m3fn" || n == "float8_e4m3fn") {
      return "fp8_e4m3";
    }
    if (n == "fp8_e5m2" || n == "e5m2" || n == "float8_e5m2") {
      return "fp8_e5m2";
    }
    try {
      if (canonical_dtype(n) == dtype) {
        return dtype;
      }
    } catch (const std::invalid_argument&) {
    }
    throw std::invalid_argument("unknown KV-cache dtype '" + name + "' for " + dtype +
                                " queries (expected auto, fp8, fp8_e4m3 or fp8_e5m2, or the "
                                "query dtype)");
  }
  // Query dtype and cache dtype as one category, "fp16" or "fp16+fp8_e4m3": what a point must
  // share with a query to be free of the dtype penalty.
  [[nodiscard]] static std::string dtypes_of(const nlohmann::json& p) {
    return category(p.at("dtype").get<std::string>(), cache_dtype_of(p));
  }
  [[nodiscard]] static std::string dtypes_of(const Query& q) {
    const std::string dtype = canonical_dtype(q.dtype);
    return category(dtype, canonical_kv_dtype(q.kv_dtype, dtype));
  }

  // v1 or v2 and the configuration for a decode call. Throws when the table has no points.
  [[nodiscard]] Choice lookup(const Query& query) const {
    Query q = query;
    if (!q.seq_lens.empty()) {
      for (int v : q.seq_lens) {
        if (v < 1) {
          throw std::invalid_argument("lookup needs context lengths >= 1");
        }
      }
      if (has_batch_rules()) {
        return lookup_batch(q);
      }
      q.batch = int(q.seq_lens.size());
      q.context_len = *std::max_element(q.seq_lens.begin(), q.seq_lens.end());
    }
    if (q.batch < 1 || q.context_len < 1 || q.num_heads < 1 || q.num_kv_heads < 1 ||
        q.head_dim < 1 || q.block_size < 1) {
      throw std::invalid_argument("lookup needs positive batch, context_len, heads, head_dim "
                                  "and block_size");
    }
    check_query_mask(q);
    const nlohmann::json& pts = t_["decode"];
    const nlohmann::json* best = nullptr;
    double best_d = 0.0;
    const auto exact = exact_.find(exact_key(q.batch, q.num_kv_heads,
                                             double(q.num_heads) / double(q.num_kv_heads),
                                             q.head_dim, q.block_size, dtypes_of(q), q.causal,
                                             q.window_left, q.window_right, q.softcap));
    if (exact != exact_.end()) {
      best = &pts[exact->second]; // distance 0: no other point is nearer
    } else {
      for (const auto& p : pts) {
        const double d = distance(p, q);
        if (best == nullptr || d < best_d - kTieEpsilon) {
          best = &p;
          best_d = d;
        }
      }
    }
    if (best == nullptr) {
      throw std::runtime_error("threshold table has no decode points");
    }
    const nlohmann::json& p = *best;
    Choice c;
    c.distance = best_d;
    c.exact_point = best_d == 0.0;
    c.point = p;
    c.point.erase("measured");
    c.family = uses_v2(p, version_, q.context_len) ? "decode_v2" : "decode_v1";
    // The configuration: that family's best at the nearest measured context length; when the
    // family was never measured at this point, the other family's.
    for (int attempt = 0; attempt < 2; ++attempt) {
      const char* slot = c.family == "decode_v2" ? "v2" : "v1";
      const nlohmann::json* pick = nullptr;
      double pick_d = 0.0;
      for (const auto& m : p.at("measured")) {
        if (!m.contains(slot) || m[slot].is_null()) {
          continue;
        }
        const double d = std::fabs(std::log2(m.at("context_len").get<double>()) -
                                   std::log2(double(q.context_len)));
        // A tie goes to the shorter length, whatever order the list is in (attn-tune writes
        // it ascending; a table edited by hand need not be).
        if (pick == nullptr || d < pick_d - kTieEpsilon ||
            (std::fabs(d - pick_d) <= kTieEpsilon &&
             m.at("context_len").get<int>() < pick->at("context_len").get<int>())) {
          pick = &m;
          pick_d = d;
        }
      }
      if (pick != nullptr) {
        c.config = (*pick)[slot].at("config");
        c.config_key = c.config.at("key").get<std::string>();
        const nlohmann::json& params = c.config.at("params");
        c.partition = c.family == "decode_v2" && params.contains("partition")
                          ? params["partition"].get<int>()
                          : 0;
        c.measured_context = pick->at("context_len").get<int>();
        return c;
      }
      c.family = c.family == "decode_v2" ? "decode_v1" : "decode_v2";
    }
    throw std::runtime_error("threshold table point has no measured configuration");
  }

private:
  // The nearest batch rule's leaf for the batch `q.seq_lens`.
  [[nodiscard]] Choice lookup_batch(const Query& q) const {
    if (q.num_heads < 1 || q.num_kv_heads < 1 || q.head_dim < 1 || q.block_size < 1) {
      throw std::invalid_argument("lookup needs positive heads, head_dim and block_size");
    }
    check_query_mask(q);
    const nlohmann::json* best = nullptr;
    double best_d = 0.0;
    for (const auto& r : t_["batch_rules"]) {
      const double d = shape_distance(r, q);
      if (best == nullptr || d < best_d - kTieEpsilon) {
        best = &r;
        best_d = d;
      }
    }
    // Another shape's rule where the decode points have a nearer one (the query's own, which had
    // no batches, or whose batches gave no rule): its leaf could name what this shape cannot run
    // (a partition that is no multiple of its block size), so the points answer, as in a table
    // without batch rules.
    if (best_d > 0.0) {
      for (const auto& p : t_["decode"]) {
        if (shape_distance(p, q) < best_d - kTieEpsilon) {
          Query u = q;
          u.seq_lens.clear();
          u.batch = int(q.seq_lens.size());
          u.context_len = *std::max_element(q.seq_lens.begin(), q.seq_lens.end());
          return lookup(u);
        }
      }
    }
    Choice c;
    c.batch_rule = true;
    c.distance = best_d;
    c.exact_point = best_d == 0.0;
    c.point = *best;
    c.point.erase("tree");
    c.rule = c.point;
    c.rule_distance = best_d;
    const nlohmann::json& leaf =
        batch_tree_leaf(best->at("tree"), BatchFeatures::of(q.seq_lens), &c.batch_path);
    if (leaf.contains("lookup")) { // the decode points answer, read with size and longest length
      Query u = q;
      u.seq_lens.clear();
      u.batch = int(q.seq_lens.size());
      u.context_len = *std::max_element(q.seq_lens.begin(), q.seq_lens.end());
      Choice from_points = lookup(u);
      from_points.batch_rule = true;
      from_points.batch_path = c.batch_path + (c.batch_path.empty() ? "" : ", ") + "decode points";
      from_points.rule = c.point;
      from_points.rule_distance = best_d;
      return from_points;
    }
    c.family = leaf.at("family").get<std::string>();
    c.config = leaf.at("config");
    c.config_key = c.config.at("key").get<std::string>();
    const nlohmann::json& params = c.config.at("params");
    c.partition = c.family == "decode_v2" && params.contains("partition")
                      ? params["partition"].get<int>()
                      : 0;
    c.measured_context = 0;
    return c;
  }

  // What `table lookup` and the Python reader refuse in a query besides its sizes: heads that
  // are no multiple of the KV heads, a window below -1, a soft cap below 0 or not finite.
  static void check_query_mask(const Query& q) {
    if (q.num_heads % q.num_kv_heads != 0) {
      throw std::invalid_argument("lookup needs num_heads a multiple of num_kv_heads");
    }
    if (q.window_left < -1 || q.window_right < -1) {
      throw std::invalid_argument("lookup needs window_left and window_right of -1 (none) or more");
    }
    if (!(q.softcap >= 0) || !std::isfinite(q.softcap)) {
      throw std::invalid_argument("lookup needs a softcap of 0 (none) or more");
    }
  }

  // "fp16" where the cache has the query's dtype, else "fp16+fp8_e4m3".
  [[nodiscard]] static std::string category(const std::string& dtype, const std::string& cache) {
    return cache == dtype ? dtype : dtype + "+" + cache;
  }

  // The fields whose match makes a point's distance to a query 0, as one string.
  [[nodiscard]] static std::string exact_key(double batch, double kvh, double gqa, double head_dim,
                                             double block_size, const std::string& dtypes,
                                             bool causal, int window_left, int window_right,
                                             double softcap) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%.17g|%.17g|%.17g|%.17g|%.17g|%d|%d|%d|%.17g|", batch, kvh, gqa,
                  head_dim, block_size, causal ? 1 : 0, window_left, window_right,
                  softcap + 0.0); // (-0.0 + 0.0 is 0.0: a soft cap of -0 is none, as 0 is)
    return buf + dtypes;
  }

  nlohmann::json t_;
  int version_ = kTableSchemaVersion;
  std::unordered_map<std::string, std::size_t> exact_; // exact_key -> index in t_["decode"]
};

} // namespace attn_tune
