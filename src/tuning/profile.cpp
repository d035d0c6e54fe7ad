// Sweep profiles: parsing with errors that name the key path, and lookup by name or path.
#include "src/tuning/profile.h"
#include "src/io/json_unique.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "src/io/embedded.h"
#include "src/io/json_fields.h"
#include "src/model/errors.h"

namespace attn {

namespace {

using nlohmann::json;

// Parsing context: the origin ("profile quick") and the key path being read.
struct Ctx {
  std::string origin;
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw InputError(origin + ": " + path + ": " + what);
  }
};

std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

// An integer in [lo, hi] (hi at most 2^30), checked by the door's integer gate
// (src/io/json_fields.h): an unsigned value past INT64_MAX is refused, never wrapped (2^64 - 1 is
// not -1). The bounds of a workload's fields are the ones results.jsonl's reader holds them to, so
// that a profile that parses never makes lines its own results file refuses.
int get_int(const Ctx& c, const std::string& path, const json& v, int lo, const char* what,
            int hi = 1 << 30) {
  try {
    return int(JsonDoor().integer(v, path, lo, hi));
  } catch (const InputError&) {
    // The bound is named where it is what the value broke.
    const bool over = v.is_number() && !(v.get<double>() <= double(hi));
    c.fail(path, std::string("expected ") + what +
                     (over ? " (at most " + std::to_string(hi) + ")" : std::string()) + ", got " +
                     shown(v));
  }
}

double get_num(const Ctx& c, const std::string& path, const json& v, double lo, const char* what,
               double hi = 1e30) {
  if (!v.is_number() || !(v.get<double>() >= lo) || !(v.get<double>() <= hi)) {
    const bool over = v.is_number() && v.get<double>() > hi;
    c.fail(path, std::string("expected ") + what +
                     (over ? " (at most " + shown(json(hi)) + ")" : std::string()) + ", got " +
                     shown(v));
  }
  return v.get<double>();
}

// A softcap: 0 (off) or a number the kernels' fp32 holds as a normal number. One below fp32's
// smallest normal (1e-50) is 0 or subnormal there, so the kernels would run without the cap, or
// with another, while the reference caps at the profile's value.
double get_softcap(const Ctx& c, const std::string& path, const json& v) {
  const double x = get_num(c, path, v, 0.0, "a number >= 0 (0: off)");
  if (x > 0 && x < double(std::numeric_limits<float>::min())) {
    c.fail(path, "expected 0 (off) or at least 1.2e-38 (fp32's smallest normal number, as "
                 "kernels hold the cap), got " +
                     shown(v));
  }
  return x;
}

bool get_bool(const Ctx& c, const std::string& path, const json& v) {
  if (!v.is_boolean()) {
    c.fail(path, "expected true or false, got " + shown(v));
  }
  return v.get<bool>();
}

DType get_dtype(const Ctx& c, const std::string& path, const json& v) {
  if (!v.is_string()) {
    c.fail(path, "expected a dtype (\"fp32\", \"fp16\" or \"bf16\"), got " + shown(v));
  }
  try {
    return parse_dtype(v.get<std::string>());
  } catch (const InputError&) {
    c.fail(path, "expected a dtype (\"fp32\", \"fp16\" or \"bf16\"), got " + shown(v));
  }
}

// A KV-cache dtype: "auto" (unset: the query's dtype) or an fp8 format (its names as
// parse_kv_dtype takes them: fp8, fp8_e4m3, fp8_e5m2, ...).
std::optional<DType> get_kv_dtype(const Ctx& c, const std::string& path, const json& v) {
  const char* expected = "expected a KV-cache dtype (\"auto\", \"fp8_e4m3\" or \"fp8_e5m2\"), got ";
  if (!v.is_string()) {
    c.fail(path, expected + shown(v));
  }
  if (v.get<std::string>() == "auto") {
    return std::nullopt;
  }
  try {
    const DType d = parse_kv_dtype(v.get<std::string>(), DType::f32);
    if (is_fp8(d)) {
      return d;
    }
  } catch (const InputError&) {
  }
  c.fail(path, expected + shown(v));
}

// An axis is a non-empty list of values, or one bare value (a list of one).
template <class T, class F>
std::vector<T> get_axis(const Ctx& c, const std::string& path, const json& v, F one,
                        bool distinct = true) {
  std::vector<T> out;
  if (v.is_array()) {
    if (v.empty()) {
      c.fail(path, "expected a non-empty list");
    }
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::string at = path + "[" + std::to_string(i) + "]";
      out.push_back(one(at, v[i]));
      // An axis lists each value once: a repeat would be measured twice over, or be a typo.
      if (distinct && std::find(out.begin(), out.end() - 1, out.back()) != out.end() - 1) {
        c.fail(at, shown(v[i]) + " is listed twice (an axis lists each value once)");
      }
    }
  } else {
    out.push_back(one(path, v));
  }
  return out;
}

void check_keys(const Ctx& c, const std::string& path, const json& obj,
                const std::set<std::string>& allowed) {
  if (!obj.is_object()) {
    c.fail(path.empty() ? "(top level)" : path, "expected an object, got " + shown(obj));
  }
  for (const auto& [k, v] : obj.items()) {
    if (!allowed.count(k)) {
      std::string list;
      for (const auto& a : allowed) {
        list += (list.empty() ? "" : ", ") + a;
      }
      c.fail(path.empty() ? k : path + "." + k, "unknown key (expected one of: " + list + ")");
    }
  }
}

PhaseGrid parse_grid(const Ctx& c, const std::string& path, const json& g, Phase phase) {
  std::set<std::string> allowed = {"batch",       "num_kv_heads", "gqa_ratio", "num_heads",
                                   "head_dim",    "block_size",   "dtype",     "kv_dtype",
                                   "causal",      "window_left",  "window_right", "softcap"};
  if (phase == Phase::decode) {
    allowed.insert({"context_len", "context_lens", "length_mix"});
  } else {
    allowed.insert({"q_len", "k_len"});
  }
  check_keys(c, path, g, allowed);
  auto bounded = [&](int hi) {
    return [&c, hi](const std::string& p, const json& v) {
      return get_int(c, p, v, 1, "a positive integer", hi);
    };
  };
  auto window = [&](const std::string& p, const json& v) {
    return get_int(c, p, v, -1, "-1 (unbounded) or a non-negative integer", kMaxContextLen);
  };
  auto req = [&](const char* key) -> const json& {
    if (!g.contains(key)) {
      c.fail(path + "." + key, "missing (required)");
    }
    return g[key];
  };
  PhaseGrid r;
  r.batch = get_axis<int>(c, path + ".batch", req("batch"), bounded(kMaxBatch));
  if (phase == Phase::decode) {
    if (!g.contains("context_len") && !g.contains("context_lens") && !g.contains("length_mix")) {
      c.fail(path + ".context_len", "missing (give context_len, context_lens or length_mix)");
    }
    if (g.contains("context_len")) {
      r.context_len =
          get_axis<int>(c, path + ".context_len", g["context_len"], bounded(kMaxContextLen));
    }
    if (g.contains("context_lens")) {
      const json& l = g["context_lens"];
      if (!l.is_array() || l.empty()) {
        c.fail(path + ".context_lens", "expected a non-empty list of batches (lists of lengths)");
      }
      for (std::size_t i = 0; i < l.size(); ++i) {
        const std::string at = path + ".context_lens[" + std::to_string(i) + "]";
        if (!l[i].is_array() || l[i].empty()) {
          c.fail(at, "expected a non-empty list of context lengths, got " + shown(l[i]));
        }
        if (l[i].size() > std::size_t(kMaxBatch)) {
          c.fail(at, "a batch of " + std::to_string(l[i].size()) + " sequences (at most " +
                         std::to_string(kMaxBatch) + ")");
        }
        // One batch's lengths: sequences of one length are common.
        r.context_lens.push_back(
            get_axis<int>(c, at, l[i], bounded(kMaxContextLen), /*distinct=*/false));
        // The same batch twice is one workload, measured once: listed twice, as an axis value
        // listed twice, it is refused.
        for (std::size_t k = 0; k + 1 < r.context_lens.size(); ++k) {
          if (r.context_lens[k] == r.context_lens.back()) {
            c.fail(at, "the same batch as " + path + ".context_lens[" + std::to_string(k) +
                           "] (a batch is listed once)");
          }
        }
      }
    }
    if (g.contains("length_mix")) {
      const json& l = g["length_mix"];
      if (!l.is_array() || l.empty()) {
        c.fail(path + ".length_mix", "expected a non-empty list of length distributions");
      }
      for (std::size_t i = 0; i < l.size(); ++i) {
        r.length_mix.push_back(
            parse_length_mix(l[i], c.origin, path + ".length_mix[" + std::to_string(i) + "]"));
      }
    }
  } else {
    r.q_len = get_axis<int>(c, path + ".q_len", req("q_len"), bounded(kMaxContextLen));
    r.k_len = get_axis<int>(c, path + ".k_len", req("k_len"), bounded(kMaxContextLen));
    // The grid keeps the pairs with q_len <= k_len: one without any would sweep no prefill.
    if (*std::min_element(r.q_len.begin(), r.q_len.end()) >
        *std::max_element(r.k_len.begin(), r.k_len.end())) {
      c.fail(path + ".q_len", "every q_len is longer than every k_len: the grid keeps the pairs "
                              "with q_len <= k_len, and none is left");
    }
  }
  r.num_kv_heads =
      get_axis<int>(c, path + ".num_kv_heads", req("num_kv_heads"), bounded(kMaxHeads));
  if (g.contains("gqa_ratio") == g.contains("num_heads")) {
    c.fail(path, "give exactly one of gqa_ratio and num_heads");
  }
  if (g.contains("gqa_ratio")) {
    r.gqa_ratio = get_axis<int>(c, path + ".gqa_ratio", g["gqa_ratio"], bounded(kMaxHeads));
  } else {
    r.num_heads = get_axis<int>(c, path + ".num_heads", g["num_heads"], bounded(kMaxHeads));
  }
  r.head_dim = get_axis<int>(c, path + ".head_dim", req("head_dim"),
                             [&](const std::string& p, const json& v) {
                               const int d = bounded(kMaxHeadDim)(p, v);
                               if (d % kHeadDimStep != 0) {
                                 c.fail(p, std::to_string(d) + " is not a multiple of " +
                                               std::to_string(kHeadDimStep));
                               }
                               return d;
                             });
  r.block_size = get_axis<int>(c, path + ".block_size", req("block_size"), bounded(kMaxBlockSize));
  r.dtype =
      get_axis<DType>(c, path + ".dtype", req("dtype"),
                      [&](const std::string& p, const json& v) { return get_dtype(c, p, v); });
  if (g.contains("kv_dtype")) {
    r.kv_dtype = get_axis<std::optional<DType>>(
        c, path + ".kv_dtype", g["kv_dtype"],
        [&](const std::string& p, const json& v) { return get_kv_dtype(c, p, v); });
  }
  r.causal =
      g.contains("causal")
          ? get_axis<bool>(c, path + ".causal", g["causal"],
                           [&](const std::string& p, const json& v) { return get_bool(c, p, v); })
          : std::vector<bool>{true};
  r.window_left = g.contains("window_left")
                      ? get_axis<int>(c, path + ".window_left", g["window_left"], window)
                      : std::vector<int>{-1};
  r.window_right = g.contains("window_right")
                       ? get_axis<int>(c, path + ".window_right", g["window_right"], window)
                       : std::vector<int>{-1};
  r.softcap = g.contains("softcap") ? get_axis<double>(c, path + ".softcap", g["softcap"],
                                                       [&](const std::string& p, const json& v) {
                                                         return get_softcap(c, p, v);
                                                       })
                                    : std::vector<double>{0.0};
  return r;
}

// A configuration entry: an object of integer parameters, each a value or a list (crossed).
std::vector<KernelConfig> parse_config_entry(const Ctx& c, const std::string& path, const json& e,
                                             Family f) {
  if (!e.is_object()) {
    c.fail(path, "expected an object of integer parameters, got " + shown(e));
  }
  std::vector<KernelConfig> out(1, KernelConfig{f, {}});
  for (const auto& [k, v] : e.items()) {
    std::vector<int> values =
        get_axis<int>(c, path + "." + k, v, [&](const std::string& p, const json& x) {
          return get_int(c, p, x, 0, "a non-negative integer");
        });
    std::vector<KernelConfig> next;
    for (const auto& base : out) {
      for (int x : values) {
        KernelConfig cfg = base;
        cfg.params[k] = x;
        next.push_back(cfg);
      }
    }
    out = std::move(next);
  }
  return out;
}

TimingOptions parse_timing(const Ctx& c, const json& t) {
  check_keys(c, "timing", t,
             {"warmup", "warmup_seconds", "min_reps", "max_reps", "max_seconds", "target_noise",
              "flush_cache", "mode"});
  TimingOptions o;
  if (t.contains("warmup")) {
    o.warmup = get_int(c, "timing.warmup", t["warmup"], 0, "a non-negative integer");
  }
  if (t.contains("warmup_seconds")) {
    o.warmup_seconds =
        get_num(c, "timing.warmup_seconds", t["warmup_seconds"], 0.0, "seconds >= 0", 3600.0);
  }
  if (t.contains("min_reps")) {
    o.min_reps = get_int(c, "timing.min_reps", t["min_reps"], 1, "a positive integer");
  }
  if (t.contains("max_reps")) {
    o.max_reps = get_int(c, "timing.max_reps", t["max_reps"], 1, "a positive integer");
  }
  if (o.max_reps < o.min_reps) {
    c.fail("timing.max_reps", "must be >= timing.min_reps (" + std::to_string(o.min_reps) + ")");
  }
  if (t.contains("max_seconds")) {
    o.max_seconds = get_num(c, "timing.max_seconds", t["max_seconds"], 0.0, "seconds >= 0", 3600.0);
  }
  if (t.contains("target_noise")) {
    o.target_noise = get_num(c, "timing.target_noise", t["target_noise"], 0.0, "a number >= 0");
  }
  if (t.contains("flush_cache")) {
    o.flush_cache = get_bool(c, "timing.flush_cache", t["flush_cache"]);
  }
  if (t.contains("mode")) {
    const auto m =
        t["mode"].is_string() ? parse_timing_mode(t["mode"].get<std::string>()) : std::nullopt;
    if (!m) {
      c.fail("timing.mode", "expected \"events\" or \"graph\", got " + shown(t["mode"]));
    }
    o.mode = *m;
  }
  return o;
}

// A held-out point: scalar fields; a missing one takes the first value of its phase's axis.
Workload parse_held_out(const Ctx& c, const std::string& path, const json& h, const Profile& p) {
  if (!h.is_object()) {
    c.fail(path, "expected an object, got " + shown(h));
  }
  Phase phase = Phase::decode;
  if (h.contains("phase")) {
    if (h["phase"] == "prefill") {
      phase = Phase::prefill;
    } else if (h["phase"] != "decode") {
      c.fail(path + ".phase", "expected \"decode\" or \"prefill\", got " + shown(h["phase"]));
    }
  }
  const auto& grid = phase == Phase::decode ? p.decode : p.prefill;
  if (!grid) {
    c.fail(path + ".phase", std::string("the profile has no ") + phase_name(phase) + " grid");
  }
  std::set<std::string> allowed = {"phase",     "batch",       "num_kv_heads", "gqa_ratio",
                                   "num_heads", "head_dim",    "block_size",   "dtype",
                                   "kv_dtype",  "causal",      "window_left",  "window_right",
                                   "softcap"};
  if (phase == Phase::decode) {
    allowed.insert("context_len");
  } else {
    allowed.insert({"q_len", "k_len"});
  }
  check_keys(c, path, h, allowed);
  // The grid's bounds, which results.jsonl's reader holds every line to (a held-out point past
  // them would be measured, then refused by its own sweep).
  const std::map<std::string, int> upper = {{"batch", kMaxBatch},
                                            {"context_len", kMaxContextLen},
                                            {"q_len", kMaxContextLen},
                                            {"k_len", kMaxContextLen},
                                            {"num_kv_heads", kMaxHeads},
                                            {"num_heads", kMaxHeads},
                                            {"gqa_ratio", kMaxHeads},
                                            {"head_dim", kMaxHeadDim},
                                            {"block_size", kMaxBlockSize},
                                            {"window_left", kMaxContextLen},
                                            {"window_right", kMaxContextLen}};
  auto pint = [&](const char* key, int fallback, int lo = 1) {
    if (!h.contains(key)) {
      return fallback;
    }
    return get_int(c, path + "." + key, h[key], lo,
                   lo == 1 ? "a positive integer" : "-1 (unbounded) or a non-negative integer",
                   upper.at(key));
  };
  const PhaseGrid& g = *grid;
  Workload w;
  w.phase = phase;
  w.held_out = true;
  w.batch = pint("batch", g.batch[0]);
  if (phase == Phase::decode) {
    if (g.context_len.empty() && !h.contains("context_len")) {
      c.fail(path + ".context_len", "missing (the decode grid has no context_len to default to)");
    }
    w.context_len = pint("context_len", g.context_len.empty() ? 1 : g.context_len[0]);
  } else {
    w.q_len = pint("q_len", g.q_len[0]);
    w.k_len = pint("k_len", g.k_len[0]);
  }
  AttnParams& a = w.params;
  a.num_kv_heads = pint("num_kv_heads", g.num_kv_heads[0]);
  if (h.contains("gqa_ratio") && h.contains("num_heads")) {
    c.fail(path, "give at most one of gqa_ratio and num_heads");
  }
  if (h.contains("num_heads")) {
    a.num_heads = pint("num_heads", 0);
  } else if (h.contains("gqa_ratio") || !g.gqa_ratio.empty()) {
    a.num_heads = a.num_kv_heads * pint("gqa_ratio", g.gqa_ratio.empty() ? 1 : g.gqa_ratio[0]);
  } else {
    a.num_heads = g.num_heads[0];
  }
  a.head_dim = pint("head_dim", g.head_dim[0]);
  a.block_size = pint("block_size", g.block_size[0]);
  a.dtype = h.contains("dtype") ? get_dtype(c, path + ".dtype", h["dtype"]) : g.dtype[0];
  a.kv_dtype =
      h.contains("kv_dtype") ? get_kv_dtype(c, path + ".kv_dtype", h["kv_dtype"]) : g.kv_dtype[0];
  a.causal = h.contains("causal") ? get_bool(c, path + ".causal", h["causal"]) : bool(g.causal[0]);
  a.window_left = pint("window_left", g.window_left[0], -1);
  a.window_right = pint("window_right", g.window_right[0], -1);
  a.softcap =
      h.contains("softcap") ? get_softcap(c, path + ".softcap", h["softcap"]) : g.softcap[0];
  try {
    a.validate();
  } catch (const InputError& e) {
    c.fail(path, e.what());
  }
  return w;
}

std::string read_file_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) {
    throw InputError("cannot read profile '" + p.string() + "'");
  }
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

Profile parse_text(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = parse_json_unique_keys(text);
  } catch (const DuplicateKey& e) {
    throw InputError(origin + ": " + e.what());
  } catch (const json::exception& e) {
    throw InputError(origin + ": not valid JSON (" + json_error_words(e) + ")");
  }
  return parse_profile(j, origin);
}

} // namespace

void add_traffic(Profile& p, std::vector<Workload> traffic) {
  std::string keys = p.hash;
  for (const Workload& w : traffic) {
    // Appended piece by piece: GCC 12 warns (-Wstringop-overflow, a false positive) on
    // `"|" + w.key()`, whose insert at the front it cannot bound.
    keys += '|';
    keys += w.key();
    keys += w.held_out ? " held out" : "";
    keys += " w=";
    keys += std::to_string(w.weight);
  }
  p.hash = fnv1a_hex(keys);
  p.traffic = std::move(traffic);
}

Profile parse_profile(const json& j, const std::string& origin) {
  Ctx c{origin};
  // Another of attn-tune's own files given where a profile belongs: said as such, before its
  // first key is called unknown.
  if (j.is_object() && j.contains("schema") && j["schema"].is_string()) {
    const std::string schema = j["schema"].get<std::string>();
    if (schema.starts_with("attn-tune/")) {
      throw InputError(origin + ": this is an attn-tune " + schema.substr(10) +
                       " file, not a profile (a profile names the grid to sweep: "
                       "docs/profiles.md)");
    }
  }
  check_keys(c, "", j,
             {"name", "description", "decode", "prefill", "configs", "timing", "validation",
              "pool_factor", "held_out"});
  Profile p;
  if (!j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty()) {
    c.fail("name", j.contains("name") ? "expected a non-empty string, got " + shown(j["name"])
                                      : "missing (required)");
  }
  p.name = j["name"].get<std::string>();
  // The name becomes a folder (attn-tune-out/NAME): "." and ".." would be this folder or the
  // one above it.
  if (p.name.find_first_not_of('.') == std::string::npos) {
    c.fail("name", "expected a name with a letter or digit (it names the output folder), got " +
                       shown(j["name"]));
  }
  for (char ch : p.name) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.')) {
      c.fail("name", "use letters, digits, '-', '_' and '.' only, got " + shown(j["name"]));
    }
  }
  if (j.contains("description")) {
    if (!j["description"].is_string()) {
      c.fail("description", "expected a string, got " + shown(j["description"]));
    }
    p.description = j["description"].get<std::string>();
  }
  if (j.contains("decode")) {
    p.decode = parse_grid(c, "decode", j["decode"], Phase::decode);
  }
  if (j.contains("prefill")) {
    p.prefill = parse_grid(c, "prefill", j["prefill"], Phase::prefill);
  }
  if (!p.decode && !p.prefill) {
    c.fail("decode", "a profile needs a decode grid, a prefill grid or both");
  }
  if (j.contains("configs")) {
    const json& cf = j["configs"];
    check_keys(c, "configs", cf, {"decode_v1", "decode_v2", "prefill"});
    for (const auto& [k, v] : cf.items()) {
      const std::string path = "configs." + k;
      if (v.is_string()) {
        if (v != "auto") {
          c.fail(path, "expected \"auto\" or a list of configurations, got " + shown(v));
        }
        continue;
      }
      if (!v.is_array() || v.empty()) {
        c.fail(path, "expected \"auto\" or a non-empty list of configurations, got " + shown(v));
      }
      const Family f = parse_family(k);
      auto& list = p.configs[f];
      for (std::size_t i = 0; i < v.size(); ++i) {
        for (auto& cfg : parse_config_entry(c, path + "[" + std::to_string(i) + "]", v[i], f)) {
          if (std::find(list.begin(), list.end(), cfg) == list.end()) {
            list.push_back(cfg);
          }
        }
      }
    }
  }
  if (j.contains("timing")) {
    p.timing = parse_timing(c, j["timing"]);
  }
  if (j.contains("validation")) {
    const json& v = j["validation"];
    check_keys(c, "validation", v, {"max_reference_work", "min_rows"});
    if (v.contains("max_reference_work")) {
      const json& x = v["max_reference_work"];
      if (!x.is_number() || !(x.get<double>() >= 1.0) || x.get<double>() > 1e18) {
        c.fail("validation.max_reference_work", "expected a positive number, got " + shown(x));
      }
      p.validation.max_reference_work = int64_t(x.get<double>());
    }
    if (v.contains("min_rows")) {
      p.validation.min_rows =
          get_int(c, "validation.min_rows", v["min_rows"], 1, "a positive integer");
    }
  }
  if (j.contains("pool_factor")) {
    p.pool_factor = get_num(c, "pool_factor", j["pool_factor"], 1.0, "a number >= 1", 1024.0);
  }
  if (j.contains("held_out")) {
    const json& h = j["held_out"];
    if (!h.is_array()) {
      c.fail("held_out", "expected a list of workloads, got " + shown(h));
    }
    for (std::size_t i = 0; i < h.size(); ++i) {
      const std::string at = "held_out[" + std::to_string(i) + "]";
      Workload w = parse_held_out(c, at, h[i], p);
      for (std::size_t k = 0; k < p.held_out.size(); ++k) {
        if (p.held_out[k].key() == w.key()) {
          c.fail(at, "the same workload as held_out[" + std::to_string(k) + "]");
        }
      }
      p.held_out.push_back(std::move(w));
    }
  }
  // Every grid combination must be a valid problem; say which axis value breaks it.
  for (const auto* g : {&p.decode, &p.prefill}) {
    if (!*g) {
      continue;
    }
    const char* gname = g == &p.decode ? "decode" : "prefill";
    for (int kvh : (*g)->num_kv_heads) {
      for (int h : (*g)->num_heads) {
        if (h % kvh != 0) {
          c.fail(std::string(gname) + ".num_heads",
                 std::to_string(h) + " is not a multiple of num_kv_heads " + std::to_string(kvh));
        }
      }
    }
    // head_dim and block_size are held to their bounds where their axes are read.
  }
  p.hash = fnv1a_hex(j.dump());
  return p;
}

std::vector<std::string> builtin_profile_names() {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < generated::kEmbeddedProfileCount; ++i) {
    names.emplace_back(generated::kEmbeddedProfiles[i].name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<std::string> builtin_profile_text(const std::string& name) {
  for (std::size_t i = 0; i < generated::kEmbeddedProfileCount; ++i) {
    const auto& e = generated::kEmbeddedProfiles[i];
    if (name == e.name) {
      return std::string(e.data, e.size);
    }
  }
  return std::nullopt;
}

Profile load_profile(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  const bool looks_like_path =
      name_or_path.find('/') != std::string::npos ||
      (name_or_path.size() > 5 && name_or_path.substr(name_or_path.size() - 5) == ".json");
  std::error_code ec;
  if (looks_like_path || fs::is_regular_file(name_or_path, ec)) {
    // A folder is named as one; a pipe or device (/dev/stdin) is read as a file is.
    if (fs::is_directory(name_or_path, ec)) {
      throw InputError("profile '" + name_or_path + "' is a folder, not a profile file");
    }
    if (!fs::exists(name_or_path, ec)) {
      throw InputError("profile file '" + name_or_path + "' does not exist");
    }
    return parse_text(read_file_text(name_or_path), "profile " + name_or_path);
  }
  if (auto text = builtin_profile_text(name_or_path)) {
    return parse_text(*text, "profile " + name_or_path);
  }
  std::string list;
  for (const auto& n : builtin_profile_names()) {
    list += (list.empty() ? "" : ", ") + n;
  }
  throw InputError("unknown profile '" + name_or_path + "' (built in: " + list +
                   "; or give a path to a .json file)");
}

} // namespace attn
