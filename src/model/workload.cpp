#include "src/model/workload.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "src/model/errors.h"
#include "src/model/problem_gen.h"

namespace attn {

using nlohmann::json;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string fnv1a_hex(const std::string& s) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a(s)));
  return buf;
}

MaskOption Workload::mask() const {
  return {params.causal, params.window_left, params.window_right, params.softcap};
}

std::vector<int> Workload::decode_lens() const {
  return mixed() ? context_lens : std::vector<int>(std::size_t(batch), context_len);
}

void Workload::set_decode_lens(const std::vector<int>& lens) {
  if (lens.empty() || *std::min_element(lens.begin(), lens.end()) < 1) {
    throw InputError("a decode batch needs at least one sequence, each of length >= 1");
  }
  phase = Phase::decode;
  batch = int(lens.size());
  context_len = *std::max_element(lens.begin(), lens.end());
  context_lens = lens;
}

namespace {

std::string lens_text(const std::vector<int>& lens) {
  std::string s;
  for (int v : lens) {
    s += (s.empty() ? "" : ",") + std::to_string(v);
  }
  return s;
}

} // namespace

std::string Workload::key() const {
  std::ostringstream s;
  s << phase_name(phase) << " b=" << batch;
  if (phase == Phase::decode && mixed()) {
    const long long sum = std::accumulate(context_lens.begin(), context_lens.end(), 0LL);
    s << " ctx=mix:" << context_len << "/" << sum << "/"
      << fnv1a_hex(lens_text(context_lens)).substr(8);
  } else if (phase == Phase::decode) {
    s << " ctx=" << context_len;
  } else {
    s << " q=" << q_len << " k=" << k_len;
  }
  s << " h=" << params.num_heads << " kvh=" << params.num_kv_heads << " d=" << params.head_dim
    << " bs=" << params.block_size << " " << dtype_name(params.dtype)
    << (params.causal ? " causal" : " full") << " wl=" << params.window_left
    << " wr=" << params.window_right << " cap=" << params.softcap;
  return s.str();
}

nlohmann::json Workload::to_json() const {
  json j = {{"phase", phase_name(phase)},
            {"batch", batch},
            {"num_heads", params.num_heads},
            {"num_kv_heads", params.num_kv_heads},
            {"head_dim", params.head_dim},
            {"block_size", params.block_size},
            {"dtype", std::string(dtype_name(params.dtype))},
            {"causal", params.causal},
            {"window_left", params.window_left},
            {"window_right", params.window_right},
            {"softcap", params.softcap},
            {"held_out", held_out}};
  if (phase == Phase::decode) {
    j["context_len"] = context_len;
    if (mixed()) {
      j["context_lens"] = context_lens;
    }
    if (weight != 1.0) {
      j["weight"] = weight;
    }
  } else {
    j["q_len"] = q_len;
    j["k_len"] = k_len;
  }
  return j;
}

Workload Workload::from_json(const nlohmann::json& j) {
  try {
    Workload w;
    const std::string ph = j.at("phase").get<std::string>();
    if (ph != "decode" && ph != "prefill") {
      throw InputError("workload phase '" + ph + "' is neither decode nor prefill");
    }
    w.phase = ph == "decode" ? Phase::decode : Phase::prefill;
    w.batch = j.at("batch").get<int>();
    if (w.phase == Phase::decode) {
      w.context_len = j.at("context_len").get<int>();
      if (j.contains("context_lens")) {
        w.set_decode_lens(j.at("context_lens").get<std::vector<int>>());
      }
      w.weight = j.value("weight", 1.0);
      if (!(w.weight > 0)) {
        throw InputError("workload weight must be > 0");
      }
    } else {
      w.q_len = j.at("q_len").get<int>();
      w.k_len = j.at("k_len").get<int>();
    }
    w.params.num_heads = j.at("num_heads").get<int>();
    w.params.num_kv_heads = j.at("num_kv_heads").get<int>();
    w.params.head_dim = j.at("head_dim").get<int>();
    w.params.block_size = j.at("block_size").get<int>();
    w.params.dtype = parse_dtype(j.at("dtype").get<std::string>());
    w.params.causal = j.at("causal").get<bool>();
    w.params.window_left = j.at("window_left").get<int>();
    w.params.window_right = j.at("window_right").get<int>();
    w.params.softcap = j.at("softcap").get<double>();
    w.held_out = j.value("held_out", false);
    return w;
  } catch (const json::exception& e) {
    throw InputError(std::string("malformed workload record: ") + e.what());
  }
}

Problem make_workload_problem(const Workload& w, double pool_factor, uint64_t seed) {
  GenOptions g;
  g.seed = seed;
  g.pool_factor = pool_factor;
  if (w.phase == Phase::decode) {
    return make_decode_problem(w.params, w.decode_lens(), g);
  }
  return make_prefill_problem(w.params, std::vector<int>(std::size_t(w.batch), w.q_len),
                              std::vector<int>(std::size_t(w.batch), w.k_len), g);
}

} // namespace attn
