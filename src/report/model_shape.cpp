// The words and keys the report gives a shape, and readers of a table's measured entries.
#include <string>

#include "src/model/dtype.h"
#include "src/report/model_views.h"
#include "src/report/svg_plot.h"
#include "src/tuning/rule_fit.h"

namespace attn::report {

using nlohmann::json;

Shape shape_of(const json& p) {
  Shape s;
  s.dtype = p.at("dtype").get<std::string>();
  s.kv_dtype = p.contains("kv_dtype") ? p["kv_dtype"].get<std::string>() : "";
  s.head_dim = p.at("head_dim").get<int>();
  s.block_size = p.at("block_size").get<int>();
  s.num_kv_heads = p.at("num_kv_heads").get<int>();
  s.gqa = p.at("gqa_ratio").get<int>();
  s.num_heads = p.value("num_heads", s.num_kv_heads * s.gqa);
  s.batch = p.at("batch").get<int>();
  s.causal = p.at("causal").get<bool>();
  s.window_left = p.at("window_left").get<int>();
  s.window_right = p.at("window_right").get<int>();
  s.softcap = p.at("softcap").get<double>();
  return s;
}

Shape shape_of(const Workload& w) {
  Shape s;
  s.dtype = std::string(dtype_name(w.params.dtype));
  s.kv_dtype = w.params.fp8_cache() ? std::string(dtype_name(w.params.cache_dtype())) : "";
  s.head_dim = w.params.head_dim;
  s.block_size = w.params.block_size;
  s.num_kv_heads = w.params.num_kv_heads;
  s.gqa = w.params.group_size();
  s.num_heads = w.params.num_heads;
  s.batch = w.batch;
  s.causal = w.params.causal;
  s.window_left = w.params.window_left;
  s.window_right = w.params.window_right;
  s.softcap = w.params.softcap;
  return s;
}

std::string mask_words(const Shape& s) {
  std::string m;
  if (!s.kv_dtype.empty()) { // not a mask, but like one a category the shape is apart in
    m += " · KV cache " + s.kv_dtype;
  }
  if (!s.causal) {
    m += " · non-causal";
  }
  if (s.window_left >= 0 || s.window_right >= 0) {
    m += " · window " + std::to_string(s.window_left) + "/" + std::to_string(s.window_right);
  }
  if (s.softcap != 0.0) {
    m += " · softcap " + format_sig(s.softcap);
  }
  return m;
}

std::string map_key(const Shape& s) {
  return s.dtype + (s.kv_dtype.empty() ? "" : "+" + s.kv_dtype) + " d=" +
         std::to_string(s.head_dim) + " bs=" + std::to_string(s.block_size) + " kvh=" + std::to_string(s.num_kv_heads) + " gqa=" + std::to_string(s.gqa) +
         (s.causal ? " causal" : " noncausal") + " wl=" + std::to_string(s.window_left) +
         " wr=" + std::to_string(s.window_right) + " cap=" + format_sig(s.softcap);
}

std::string map_title(const Shape& s) {
  return s.dtype + " · head_dim " + std::to_string(s.head_dim) + " · block " +
         std::to_string(s.block_size) + " · " + std::to_string(s.num_kv_heads) +
         (s.num_kv_heads == 1 ? " KV head" : " KV heads") + " · GQA " + std::to_string(s.gqa) +
         mask_words(s);
}

std::string point_words(const Shape& s, int context_len) {
  return "b=" + std::to_string(s.batch) + " ctx=" + std::to_string(context_len) +
         " kvh=" + std::to_string(s.num_kv_heads) + " gqa=" + std::to_string(s.gqa) +
         " d=" + std::to_string(s.head_dim) + " bs=" + std::to_string(s.block_size) + " " +
         s.dtype + mask_words(s);
}

std::string decode_point_key(const Shape& s) {
  return map_key(s) + " b=" + std::to_string(s.batch);
}

attn_tune::Query query_of(const Shape& s, int context_len) {
  attn_tune::Query q;
  q.batch = s.batch;
  q.context_len = context_len;
  q.num_heads = s.num_heads;
  q.num_kv_heads = s.num_kv_heads;
  q.head_dim = s.head_dim;
  q.block_size = s.block_size;
  q.dtype = s.dtype;
  q.kv_dtype = s.kv_dtype.empty() ? "auto" : s.kv_dtype;
  q.causal = s.causal;
  q.window_left = s.window_left;
  q.window_right = s.window_right;
  q.softcap = s.softcap;
  return q;
}

Timed timed_of(const json& t) {
  Timed r;
  r.median_s = t.at("median_s").get<double>();
  r.has_spread = t.contains("p25_s") && t.contains("p75_s");
  r.p25_s = t.value("p25_s", r.median_s);
  r.p75_s = t.value("p75_s", r.median_s);
  return r;
}

bool has_time(const json& entry, const char* slot) {
  return entry.contains(slot) && entry[slot].is_object();
}

std::vector<std::pair<int, int>> v2_intervals(const json& p) {
  std::vector<std::pair<int, int>> out;
  if (p.contains("v2_intervals")) {
    for (const auto& iv : p["v2_intervals"]) {
      out.emplace_back(iv.at(0).get<int>(), iv.at(1).is_null() ? 0 : iv.at(1).get<int>());
    }
    return out;
  }
  const json& from = p.at("v2_from");
  if (from.is_string()) {
    if (from.get<std::string>() == "always") {
      out.emplace_back(1, 0);
    }
  } else {
    out.emplace_back(from.get<int>(), 0);
  }
  return out;
}

int partition_of(const json& config) {
  const json& params = config.value("params", json::object());
  return params.value("partition", kKernelSplits);
}

Rule fitted_rule_of(const json& table) {
  if (table.contains("rule") && table["rule"].contains("tiles")) {
    return fitted_rule(RuleFit::from_json(table["rule"]));
  }
  return {};
}

} // namespace attn::report
