// Mixed-length decode batches: distributions drawn from with the project's seeded generator, and
// traffic traces read line by line with errors that name the line.
#include "src/tuning/length_mix.h"
#include "src/io/json_unique.h"

#include "src/model/problem.h"
#include "src/model/workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "src/io/json_fields.h"
#include "src/model/errors.h"
#include "src/model/rng.h"

namespace attn {

using nlohmann::json;

namespace {

constexpr int kMixMaxLen = kMaxContextLen; // longest context a trace or profile may name
constexpr int kMixMaxBatch = kMaxBatch;   // most sequences in one batch
constexpr uint64_t kMaxTraceCount = uint64_t(1) << 53; // a batch line's largest count

struct MixWhere {
  std::string origin;
  std::string path;
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw InputError(origin + ": " + path + (key.empty() ? "" : "." + key) + ": " + what);
  }
};

std::string mix_shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

double mix_number(const MixWhere& w, const json& j, const std::string& key, double lo, bool open_lo) {
  if (!j.contains(key)) {
    w.fail(key, "missing (required)");
  }
  const json& v = j[key];
  const double x = v.is_number() ? v.get<double>() : NAN;
  if (!std::isfinite(x) || x < lo || (open_lo && x == lo)) {
    w.fail(key, std::string("expected a number ") + (open_lo ? "> " : ">= ") +
                    std::to_string(int(lo)) + ", got " + mix_shown(v));
  }
  return x;
}

int mix_integer(const MixWhere& w, const json& j, const std::string& key, int lo, int hi, int fallback) {
  if (!j.contains(key)) {
    return fallback;
  }
  const json& v = j[key];
  try {
    return int(JsonDoor().integer(v, key, lo, hi)); // never wrapped (src/io/json_fields.h)
  } catch (const InputError&) {
    w.fail(key, "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
                    ", got " + mix_shown(v));
  }
}

void mix_only_keys(const MixWhere& w, const json& j, const std::set<std::string>& allowed) {
  if (!j.is_object()) {
    w.fail("", "expected an object, got " + mix_shown(j));
  }
  for (const auto& [k, v] : j.items()) {
    if (!allowed.count(k)) {
      std::string list;
      for (const auto& a : allowed) {
        list += (list.empty() ? "" : ", ") + a;
      }
      w.fail(k, "unknown key (expected one of: " + list + ")");
    }
  }
}

LengthDist parse_dist(const json& j, const MixWhere& w, const std::set<std::string>& extra) {
  std::set<std::string> allowed = {"dist", "median", "sigma", "s", "min", "max", "long_count",
                                   "short", "long"};
  allowed.insert(extra.begin(), extra.end());
  mix_only_keys(w, j, allowed);
  LengthDist d;
  if (!j.contains("dist") || !j["dist"].is_string()) {
    w.fail("dist", "expected \"lognormal\", \"uniform\", \"zipf\" or \"mixture\"");
  }
  d.dist = j["dist"].get<std::string>();
  d.min = mix_integer(w, j, "min", 1, kMixMaxLen, 1);
  d.max = mix_integer(w, j, "max", 1, kMixMaxLen, 1 << 20);
  if (d.max < d.min) {
    w.fail("max", "must be >= min (" + std::to_string(d.min) + ")");
  }
  auto not_for = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys) {
      if (j.contains(k)) {
        w.fail(k, "not a parameter of dist \"" + d.dist + "\"");
      }
    }
  };
  if (d.dist == "lognormal") {
    d.median = mix_number(w, j, "median", 0.0, true);
    d.sigma = mix_number(w, j, "sigma", 0.0, false);
    not_for({"s", "long_count", "short", "long"});
  } else if (d.dist == "uniform") {
    if (!j.contains("min") || !j.contains("max")) {
      w.fail(j.contains("min") ? "max" : "min", "missing (required for dist \"uniform\")");
    }
    not_for({"median", "sigma", "s", "long_count", "short", "long"});
  } else if (d.dist == "zipf") {
    d.s = mix_number(w, j, "s", 0.0, true);
    if (!j.contains("max")) {
      w.fail("max", "missing (required for dist \"zipf\")");
    }
    not_for({"median", "sigma", "long_count", "short", "long"});
  } else if (d.dist == "mixture") {
    // A mixture's draws are its parts' draws: the bounds go on the parts, and a part is drawn
    // by one of the three laws (a mixture of mixtures is not drawn).
    not_for({"median", "sigma", "s", "min", "max"});
    for (const char* part : {"short", "long"}) {
      if (!j.contains(part)) {
        w.fail(part, "missing (required for dist \"mixture\")");
      }
      d.parts.push_back(parse_dist(j[part], MixWhere{w.origin, w.path + "." + part}, {}));
      if (d.parts.back().dist == "mixture") {
        w.fail(std::string(part) + ".dist", "a mixture's parts are lognormal, uniform or zipf");
      }
    }
    d.long_count = mix_integer(w, j, "long_count", 0, kMixMaxBatch, 1);
  } else {
    w.fail("dist", "expected \"lognormal\", \"uniform\", \"zipf\" or \"mixture\", got " +
                       mix_shown(j["dist"]));
  }
  return d;
}

int clamp_len(const LengthDist& d, double x) {
  if (!(x >= d.min)) { // NaN too
    return d.min;
  }
  return x >= d.max ? d.max : std::max(1, int(std::floor(x)));
}

int draw_one(const LengthDist& d, Rng& rng) {
  if (d.dist == "lognormal") {
    return clamp_len(d, std::exp(std::log(d.median) + d.sigma * rng.normal()));
  }
  if (d.dist == "uniform") {
    return int(rng.range(d.min, d.max));
  }
  // zipf: the continuous power law x^-s on [min, max + 1), floored (inverse CDF).
  const double u = rng.uniform();
  const double lo = d.min;
  const double hi = double(d.max) + 1.0;
  if (std::abs(d.s - 1.0) < 1e-12) {
    return clamp_len(d, lo * std::pow(hi / lo, u));
  }
  const double a = std::pow(lo, 1.0 - d.s);
  const double b = std::pow(hi, 1.0 - d.s);
  return clamp_len(d, std::pow(a + (b - a) * u, 1.0 / (1.0 - d.s)));
}

} // namespace

LengthMix parse_length_mix(const nlohmann::json& j, const std::string& origin,
                           const std::string& path) {
  const MixWhere w{origin, path};
  LengthMix m;
  m.lengths = parse_dist(j, w, {"name", "batches", "held_out_batches", "seed"});
  if (j.contains("name")) {
    if (!j["name"].is_string()) {
      w.fail("name", "expected a string, got " + mix_shown(j["name"]));
    }
    m.name = j["name"].get<std::string>();
  }
  m.batches = mix_integer(w, j, "batches", 1, 4096, 4);
  m.held_out_batches = mix_integer(w, j, "held_out_batches", 0, 4096, 0);
  m.seed = uint64_t(mix_integer(w, j, "seed", 0, 1 << 30, 1));
  if (m.name.empty()) {
    m.name = m.lengths.dist;
  }
  return m;
}

std::vector<int> draw_batch(const LengthDist& d, int batch_size, uint64_t seed) {
  Rng rng(seed);
  std::vector<int> lens;
  if (d.dist == "mixture") {
    const int n_long = std::min(d.long_count, batch_size);
    for (int i = 0; i < batch_size; ++i) {
      lens.push_back(draw_one(d.parts[i < n_long ? 1 : 0], rng));
    }
    // Where the long ones sit in the batch: seeded, so a kernel cannot rely on the order.
    for (std::size_t i = lens.size(); i > 1; --i) {
      std::swap(lens[i - 1], lens[std::size_t(rng.range(0, int64_t(i) - 1))]);
    }
    return lens;
  }
  for (int i = 0; i < batch_size; ++i) {
    lens.push_back(draw_one(d, rng));
  }
  return lens;
}

std::vector<std::vector<int>> draw_batches(const LengthMix& mix, int batch_size) {
  std::vector<std::vector<int>> out;
  Rng seeds(mix.seed * 0x9e3779b97f4a7c15ull + uint64_t(batch_size));
  for (int i = 0; i < mix.batches + mix.held_out_batches; ++i) {
    out.push_back(draw_batch(mix.lengths, batch_size, seeds.fork_seed()));
  }
  return out;
}

namespace {

// The start of a JSON object that ends before the object does: its parse fails only at the end
// of the text (what a writer killed in the middle of a line leaves).
bool torn_json(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  if (!text.starts_with('{')) {
    return false;
  }
  try {
    const json whole = json::parse(text);
    (void)whole;
  } catch (const json::parse_error& e) {
    return e.byte > text.size();
  } catch (const json::exception&) {
    return false; // a number out of range (1e999): whole, and wrong
  }
  return false;
}

// A whole line another writer appended right after a torn one ('...,4{"seq_lens":[1,2]}'): the
// position where it starts, or npos.
std::size_t after_torn(const std::string& line) {
  for (std::size_t i = line.rfind("{\""); i != std::string::npos && i > 0;
       i = line.rfind("{\"", i - 1)) {
    if (torn_json(std::string_view(line).substr(0, i)) && json::accept(line.substr(i))) {
      return i;
    }
  }
  return std::string::npos;
}

// Why a line is not JSON, from the parser's exception: its own words less its prefix, and the
// column ("not JSON: syntax error while parsing value - unexpected ']' (column 16)").
std::string not_json(const json::exception& e) {
  std::string what = e.what();
  if (const auto* p = dynamic_cast<const json::parse_error*>(&e)) {
    const std::size_t at = what.find(": ", what.find("column"));
    const std::string why = at == std::string::npos ? "not JSON" : what.substr(at + 2);
    return "not JSON: " + why + " (column " + std::to_string(p->byte) + ")";
  }
  if (dynamic_cast<const json::out_of_range*>(&e) != nullptr) {
    return "not JSON: a number out of range for a double";
  }
  if (dynamic_cast<const JsonTooDeep*>(&e) != nullptr) {
    return std::string("not a trace line: ") + e.what();
  }
  return "not JSON";
}

// How JSON calls a value's type, for "expected a JSON object, not an array".
std::string json_kind(const json& v) {
  if (v.is_array()) {
    return "a list";
  }
  if (v.is_string()) {
    return "a string";
  }
  if (v.is_boolean()) {
    return "a boolean";
  }
  if (v.is_null()) {
    return "null";
  }
  return v.is_number_integer() ? "an integer" : "a number";
}

} // namespace

Trace read_trace(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    throw InputError("traffic trace " + path + ": cannot read it");
  }
  Trace t;
  t.path = path;
  std::map<std::vector<int>, std::size_t> index;
  std::string line;
  int n = 0;
  bool seen_batch = false;
  while (std::getline(f, line)) {
    ++n;
    const std::string at = "traffic trace " + path + " line " + std::to_string(n) + ": ";
    if (line.starts_with("\xEF\xBB\xBF")) {
      // A UTF-8 byte order mark, as some editors write one: at the start of the file only (the
      // parser would skip one anywhere; JSON and the Python reader do not).
      if (n != 1) {
        throw InputError(at + "a byte order mark (only the start of the file may hold one)");
      }
      line.erase(0, 3);
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      continue;
    }
    if (line.find('\0') != std::string::npos) {
      // The parser would stop at it and drop the rest of the line (what a power loss may
      // leave: NUL bytes in place of a line); the Python reader refuses it too.
      throw InputError(at + "holds a NUL byte at column " + std::to_string(line.find('\0') + 1));
    }
    // Parsed once; only a line that is not JSON is looked at again.
    json j;
    std::optional<std::string> bad; // why the line is not JSON
    try {
      j = parse_json_unique_keys(line);
    } catch (const DuplicateKey& e) {
      try {
        const json whole = json::parse(line);
        (void)whole;
      } catch (const json::exception& inner) {
        bad = not_json(inner); // a key repeated before the line was cut short
      }
      if (!bad) {
        throw InputError(at + e.what());
      }
    } catch (const json::exception& e) {
      bad = not_json(e);
    }
    if (bad) {
      // A writer killed mid-line loses that batch only: the fragment is skipped, and a whole
      // line glued after it is read.
      const std::size_t rest = torn_json(line) ? line.size() : after_torn(line);
      if (rest == std::string::npos) {
        throw InputError(at + *bad);
      }
      t.torn_lines.push_back(n);
      if (rest == line.size()) {
        continue;
      }
      try {
        j = parse_json_unique_keys(line.substr(rest));
      } catch (const DuplicateKey& e) {
        throw InputError(at + e.what());
      }
    }
    if (!j.is_object()) {
      throw InputError(at + "expected a JSON object, not " + json_kind(j));
    }
    if (j.contains("attn_tune_trace")) {
      if (seen_batch || n != 1) {
        throw InputError(at + "a header must be the first line");
      }
      if (j.contains("seq_lens")) {
        throw InputError(at + "seq_lens: a header holds no batch (give the batch a line of its "
                              "own)");
      }
      if (!j["attn_tune_trace"].is_number_integer() || j["attn_tune_trace"] != 1) {
        throw InputError(at + "attn_tune_trace " + mix_shown(j["attn_tune_trace"]) +
                         " is not a trace version this attn-tune reads (1)");
      }
      if (j.contains("source")) {
        if (!j["source"].is_string()) {
          throw InputError(at + "source: expected a string");
        }
        t.source = j["source"].get<std::string>();
      }
      if (j.contains("shape")) {
        const json& s = j["shape"];
        if (!s.is_object()) {
          throw InputError(at + "shape: expected an object");
        }
        for (const auto& [key, value] : s.items()) {
          // A misspelt field would leave the profile's value in its place, unsaid.
          if (key != "num_heads" && key != "num_kv_heads" && key != "head_dim" &&
              key != "block_size" && key != "dtype") {
            throw InputError(at + "shape." + key +
                             ": not a shape field (num_heads, num_kv_heads, head_dim, "
                             "block_size, dtype)");
          }
        }
        // The bounds a sweep holds a profile's axes to (docs/traffic.md), so a trace names no
        // shape that only fails later, in the profile it is crossed with.
        auto field = [&](const char* key, std::optional<int>& out, int most) {
          if (!s.contains(key)) {
            return;
          }
          if (!s[key].is_number_integer() || s[key].get<int64_t>() < 1 ||
              s[key].get<int64_t>() > most) {
            throw InputError(at + "shape." + key + ": expected an integer from 1 to " +
                             std::to_string(most) + ", got " + mix_shown(s[key]));
          }
          out = s[key].get<int>();
        };
        field("num_heads", t.shape.num_heads, kMaxHeads);
        field("num_kv_heads", t.shape.num_kv_heads, kMaxHeads);
        field("head_dim", t.shape.head_dim, kMaxHeadDim);
        field("block_size", t.shape.block_size, kMaxBlockSize);
        if (t.shape.head_dim && *t.shape.head_dim % kHeadDimStep != 0) {
          throw InputError(at + "shape.head_dim: " + std::to_string(*t.shape.head_dim) +
                           " is not a multiple of " + std::to_string(kHeadDimStep));
        }
        if (t.shape.num_heads && t.shape.num_kv_heads &&
            *t.shape.num_heads % *t.shape.num_kv_heads != 0) {
          throw InputError(at + "shape.num_heads: " + std::to_string(*t.shape.num_heads) +
                           " is not a multiple of shape.num_kv_heads " +
                           std::to_string(*t.shape.num_kv_heads));
        }
        if (s.contains("dtype")) {
          const std::string d = s["dtype"].is_string() ? s["dtype"].get<std::string>() : "?";
          if (d != "fp32" && d != "fp16" && d != "bf16") { // the names, as the format says
            throw InputError(at + "shape.dtype: expected \"fp32\", \"fp16\" or \"bf16\", got " +
                             mix_shown(s["dtype"]));
          }
          t.shape.dtype = parse_dtype(d);
        }
      }
      continue;
    }
    if (!j.contains("seq_lens")) {
      throw InputError(at + "seq_lens: missing (each line after the header is one decode batch)");
    }
    const json& l = j["seq_lens"];
    if (!l.is_array() || l.empty() || l.size() > std::size_t(kMixMaxBatch)) {
      throw InputError(at + "seq_lens: expected a list of 1 to " + std::to_string(kMixMaxBatch) +
                       " context lengths");
    }
    TraceBatch b;
    b.line = n;
    for (std::size_t i = 0; i < l.size(); ++i) {
      if (!l[i].is_number_integer() || l[i].get<int64_t>() < 1 || l[i].get<int64_t>() > kMixMaxLen) {
        throw InputError(at + "seq_lens[" + std::to_string(i) +
                         "]: expected a context length from 1 to " + std::to_string(kMixMaxLen) +
                         ", got " + mix_shown(l[i]));
      }
      b.seq_lens.push_back(l[i].get<int>());
    }
    if (j.contains("count")) {
      // At most 2^53, where every count is still exact in the double the weights are kept in.
      const json& c = j["count"];
      const bool in_range =
          c.is_number_unsigned() ? c.get<uint64_t>() >= 1 && c.get<uint64_t>() <= kMaxTraceCount
          : c.is_number_integer()
              ? c.get<int64_t>() >= 1 && uint64_t(c.get<int64_t>()) <= kMaxTraceCount
              : false;
      if (!in_range) {
        throw InputError(at + "count: expected an integer from 1 to 2^53, got " +
                         mix_shown(j["count"]));
      }
      b.count = double(j["count"].get<int64_t>());
    }
    seen_batch = true;
    ++t.lines;
    t.total_count += b.count;
    auto [it, fresh] = index.try_emplace(b.seq_lens, t.batches.size());
    if (fresh) {
      t.batches.push_back(std::move(b));
    } else {
      t.batches[it->second].count += b.count;
    }
  }
  if (t.batches.empty()) {
    throw InputError("traffic trace " + path + ": no decode batches (lines with seq_lens)");
  }
  return t;
}

std::vector<TrafficSample> sample_traffic(const Trace& t, int max_batches, double hold_out,
                                          uint64_t seed) {
  Rng rng(seed ^ 0x7472616666696353ull);
  // Weighted sampling without replacement: key u^(1/w), the largest keys win (Efraimidis and
  // Spirakis' method), so frequent batches are likelier to be measured.
  auto weighted_order = [&rng](std::vector<std::size_t> idx, const std::vector<double>& w) {
    std::vector<std::pair<double, std::size_t>> keyed;
    for (std::size_t i : idx) {
      keyed.emplace_back(std::log(std::max(rng.uniform(), 1e-300)) / w[i], i);
    }
    std::sort(keyed.begin(), keyed.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<std::size_t> out;
    for (const auto& [k, i] : keyed) {
      out.push_back(i);
    }
    return out;
  };
  std::vector<double> w;
  std::vector<std::size_t> all;
  for (std::size_t i = 0; i < t.batches.size(); ++i) {
    w.push_back(t.batches[i].count);
    all.push_back(i);
  }
  std::vector<std::size_t> chosen = weighted_order(all, w);
  if (max_batches > 0 && chosen.size() > std::size_t(max_batches)) {
    chosen.resize(std::size_t(max_batches));
  }
  // Which of them are held out: uniformly, so that frequent batches are not all held out.
  std::vector<std::size_t> order = weighted_order(chosen, std::vector<double>(w.size(), 1.0));
  const std::size_t n_held = std::size_t(std::floor(hold_out * double(chosen.size()) + 1e-9));
  std::set<std::size_t> held(order.begin(), order.begin() + std::ptrdiff_t(n_held));
  std::sort(chosen.begin(), chosen.end()); // back to the trace's order
  std::vector<TrafficSample> out;
  for (std::size_t i : chosen) {
    out.push_back({t.batches[i], held.count(i) > 0});
  }
  return out;
}

} // namespace attn
