#include "src/model/workload.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "src/io/json_fields.h"
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
    << " bs=" << params.block_size << " " << dtype_name(params.dtype);
  if (params.fp8_cache()) {
    s << " kv=" << dtype_name(params.cache_dtype());
  }
  s << (params.causal ? " causal" : " full") << " wl=" << params.window_left
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
  if (params.fp8_cache()) {
    j["kv_dtype"] = std::string(dtype_name(params.cache_dtype()));
  }
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
  // Every field checked here, once: what a results line or a table says is a workload reaches
  // the consumers (group_size() divides by num_kv_heads, lengths size allocations) in range.
  const JsonDoor door;
  const std::string at = "workload";
  Workload w;
  const std::string ph = door.text(j, at, "phase");
  if (ph != "decode" && ph != "prefill") {
    door.fail(at + ".phase", "expected \"decode\" or \"prefill\", got " + JsonDoor::shown(ph));
  }
  w.phase = ph == "decode" ? Phase::decode : Phase::prefill;
  w.batch = int(door.integer(j, at, "batch", 1, kMaxBatch));
  if (w.phase == Phase::decode) {
    w.context_len = int(door.integer(j, at, "context_len", 1, kMaxContextLen));
    if (j.contains("context_lens")) {
      const json& l = door.array(j, at, "context_lens");
      if (l.size() != std::size_t(w.batch)) {
        door.fail(at + ".context_lens", "expected batch (" + std::to_string(w.batch) +
                                            ") lengths, got " + std::to_string(l.size()));
      }
      std::vector<int> lens;
      lens.reserve(l.size());
      for (std::size_t i = 0; i < l.size(); ++i) {
        lens.push_back(int(door.integer(l[i], at + ".context_lens[" + std::to_string(i) + "]", 1,
                                        kMaxContextLen)));
      }
      w.set_decode_lens(lens);
    }
    w.weight = door.number_or(j, at, "weight", 1e-300, 1e300, 1.0);
    if (!(w.weight > 0)) {
      door.fail(at + ".weight", "expected a number > 0");
    }
  } else {
    w.q_len = int(door.integer(j, at, "q_len", 1, kMaxContextLen));
    w.k_len = int(door.integer(j, at, "k_len", 1, kMaxContextLen));
  }
  w.params.num_heads = int(door.integer(j, at, "num_heads", 1, kMaxHeads));
  w.params.num_kv_heads = int(door.integer(j, at, "num_kv_heads", 1, w.params.num_heads));
  w.params.head_dim = int(door.integer(j, at, "head_dim", 1, kMaxHeadDim));
  w.params.block_size = int(door.integer(j, at, "block_size", 1, kMaxBlockSize));
  try {
    w.params.dtype = parse_dtype(door.text(j, at, "dtype"));
  } catch (const InputError& e) {
    door.fail(at + ".dtype", e.what());
  }
  if (j.contains("kv_dtype")) {
    try {
      const DType kv = parse_kv_dtype(door.text(j, at, "kv_dtype"), w.params.dtype);
      if (kv != w.params.dtype) {
        w.params.kv_dtype = kv;
      }
    } catch (const InputError& e) {
      door.fail(at + ".kv_dtype", e.what());
    }
  }
  w.params.causal = door.boolean(j, at, "causal");
  w.params.window_left = int(door.integer(j, at, "window_left", -1, kMaxContextLen));
  w.params.window_right = int(door.integer(j, at, "window_right", -1, kMaxContextLen));
  w.params.softcap = door.number(j, at, "softcap", 0.0, 1e30);
  w.held_out = door.boolean_or(j, at, "held_out", false);
  try {
    w.params.validate();
  } catch (const InputError& e) {
    door.fail(at, e.what());
  }
  return w;
}

namespace {

// The cache blocks the problem of w allocates: pool_factor per block its sequences need.
double pool_blocks(const Workload& w, double pool_factor) {
  const int bs = w.params.block_size;
  double blocks = 0;
  if (w.phase == Phase::decode) {
    for (int len : w.decode_lens()) {
      blocks += double((int64_t(len) + bs - 1) / bs);
    }
  } else {
    blocks = double(w.batch) * double((int64_t(w.k_len) + bs - 1) / bs);
  }
  return std::ceil(blocks * pool_factor);
}

} // namespace

double workload_cache_bytes(const Workload& w, double pool_factor) {
  const AttnParams& p = w.params;
  return 2.0 * pool_blocks(w, pool_factor) * p.block_size * p.num_kv_heads * p.head_dim *
         double(dtype_size(p.cache_dtype()));
}

std::string workload_too_big(const Workload& w, double pool_factor) {
  const int bs = w.params.block_size;
  const double wanted = pool_blocks(w, pool_factor);
  if (wanted <= double(int64_t(1) << 30)) {
    return "";
  }
  char n[32];
  std::snprintf(n, sizeof n, "%.0f", wanted);
  return "workload " + w.key() + " needs " + n + " cache blocks of " + std::to_string(bs) +
         " tokens (pool_factor included), more than the 2^30 a problem may have";
}

Problem make_workload_problem(const Workload& w, double pool_factor, uint64_t seed, int threads) {
  GenOptions g;
  g.seed = seed;
  g.pool_factor = pool_factor;
  g.threads = threads;
  if (w.phase == Phase::decode) {
    return make_decode_problem(w.params, w.decode_lens(), g);
  }
  return make_prefill_problem(w.params, std::vector<int>(std::size_t(w.batch), w.q_len),
                              std::vector<int>(std::size_t(w.batch), w.k_len), g);
}

} // namespace attn
