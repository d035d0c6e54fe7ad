#include "src/tuning/workloads.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "src/model/errors.h"

namespace attn {

namespace {

// A grid's workloads before they are built: the product of its axes (the length pairs counted
// as given, mixed batches and length mixes counted too). Past kMaxGridWorkloads the profile is
// refused up front.
double grid_size(const PhaseGrid& g, Phase phase) {
  const double batches = double(std::max<std::size_t>(g.batch.size(), 1));
  // Batches per shape: each length of the grid at each batch size, each mixed batch a profile
  // gives whole (context_lens), and each batch a length mix draws at each batch size.
  double n = phase == Phase::decode ? double(g.context_len.size()) * batches
                                    : double(g.q_len.size()) * double(g.k_len.size()) * batches;
  if (phase == Phase::decode) {
    n += double(g.context_lens.size());
    for (const LengthMix& mix : g.length_mix) {
      n += (double(mix.batches) + double(mix.held_out_batches)) * batches;
    }
  }
  for (std::size_t axis :
       {g.softcap.size(), g.window_right.size(), g.window_left.size(), g.causal.size(),
        std::max(g.gqa_ratio.size(), g.num_heads.size()), g.num_kv_heads.size(),
        g.block_size.size(), g.head_dim.size(), g.dtype.size(), g.kv_dtype.size()}) {
    n *= double(std::max<std::size_t>(axis, 1));
  }
  return n;
}

} // namespace

std::vector<Workload> expand_workloads(const Profile& p) {
  std::vector<Workload> out;
  for (Phase phase : {Phase::decode, Phase::prefill}) {
    const auto& grid = phase == Phase::decode ? p.decode : p.prefill;
    if (!grid) {
      continue;
    }
    const PhaseGrid& g = *grid;
    if (const double n = grid_size(g, phase); n > double(kMaxGridWorkloads)) {
      throw InputError("profile '" + p.name + "': its " + phase_name(phase) + " grid crosses to " +
                       std::to_string(int64_t(std::min(n, 9e18))) + " workloads (at most " +
                       std::to_string(kMaxGridWorkloads) + "): a sweep of that many would not end");
    }
    // Lengths as (q, k) pairs; decode has q = 1 and k = context_len.
    std::vector<std::pair<int, int>> lens;
    if (phase == Phase::decode) {
      for (int ctx : g.context_len) {
        lens.emplace_back(1, ctx);
      }
    } else {
      for (int q : g.q_len) {
        for (int k : g.k_len) {
          if (q <= k) {
            lens.emplace_back(q, k);
          }
        }
      }
    }
    // The cross product, built from the fastest-varying axis (lengths) to the slowest (dtype):
    // each cross() makes the axis it adds vary slower than those already there.
    Workload proto;
    proto.phase = phase;
    std::vector<Workload> ws;
    for (auto [q, k] : lens) {
      Workload w = proto;
      (phase == Phase::decode ? w.context_len : w.k_len) = k;
      w.q_len = phase == Phase::decode ? 0 : q;
      ws.push_back(w);
    }
    auto cross = [&ws](const auto& values, const auto& set) {
      std::vector<Workload> next;
      for (const auto& v : values) {
        for (Workload w : ws) {
          set(w, v);
          next.push_back(w);
        }
      }
      ws = std::move(next);
    };
    cross(g.batch, [](Workload& w, int v) { w.batch = v; });
    if (phase == Phase::decode) {
      // Mixed batches: the explicit ones as given, then every distribution's draws for every
      // batch size of the grid (its held-out draws flagged).
      for (const auto& lens : g.context_lens) {
        Workload w = proto;
        w.set_decode_lens(lens);
        ws.push_back(w);
      }
      for (const LengthMix& mix : g.length_mix) {
        for (int b : g.batch) {
          const auto batches = draw_batches(mix, b);
          for (std::size_t i = 0; i < batches.size(); ++i) {
            Workload w = proto;
            w.set_decode_lens(batches[i]);
            w.held_out = int(i) >= mix.batches;
            ws.push_back(w);
          }
        }
      }
    }
    cross(g.softcap, [](Workload& w, double v) { w.params.softcap = v; });
    cross(g.window_right, [](Workload& w, int v) { w.params.window_right = v; });
    cross(g.window_left, [](Workload& w, int v) { w.params.window_left = v; });
    cross(g.causal, [](Workload& w, bool v) { w.params.causal = v; });
    // num_heads is either given or num_kv_heads * gqa_ratio (filled once kvh is known).
    if (g.gqa_ratio.empty()) {
      cross(g.num_heads, [](Workload& w, int v) { w.params.num_heads = v; });
    } else {
      cross(g.gqa_ratio, [](Workload& w, int v) { w.params.num_heads = v; });
    }
    cross(g.num_kv_heads, [&g](Workload& w, int v) {
      w.params.num_kv_heads = v;
      if (!g.gqa_ratio.empty()) {
        w.params.num_heads *= v; // held the ratio until now
      }
    });
    cross(g.block_size, [](Workload& w, int v) { w.params.block_size = v; });
    cross(g.head_dim, [](Workload& w, int v) { w.params.head_dim = v; });
    cross(g.dtype, [](Workload& w, DType v) { w.params.dtype = v; });
    cross(g.kv_dtype, [](Workload& w, std::optional<DType> v) { w.params.kv_dtype = v; });
    for (const Workload& w : ws) {
      if (w.params.num_heads > kMaxHeads) {
        throw InputError("profile '" + p.name + "': num_kv_heads " +
                         std::to_string(w.params.num_kv_heads) + " x gqa_ratio makes " +
                         std::to_string(w.params.num_heads) + " query heads (at most " +
                         std::to_string(kMaxHeads) + ")");
      }
    }
    out.insert(out.end(), ws.begin(), ws.end());
  }
  out.insert(out.end(), p.traffic.begin(), p.traffic.end());
  // A drawn batch that repeats an earlier workload (equal lengths) is measured once.
  {
    std::set<std::string> keys;
    std::vector<Workload> unique;
    for (auto& w : out) {
      if (keys.insert(w.key()).second) {
        unique.push_back(std::move(w));
      }
    }
    out = std::move(unique);
  }
  // Held-out points that coincide with a grid point would leak into the fit: keep one copy,
  // flagged held out only if it is not a grid point.
  std::set<std::string> seen;
  for (const auto& w : out) {
    seen.insert(w.key());
  }
  for (const auto& w : p.held_out) {
    if (seen.insert(w.key()).second) {
      out.push_back(w);
    }
  }
  return out;
}

std::vector<Workload> traffic_workloads(const Profile& p, const Trace& t,
                                        const std::vector<TrafficSample>& sample) {
  // The shapes: the profile's decode axes with the trace header's values in their place.
  PhaseGrid g;
  if (p.decode) {
    g = *p.decode;
  } else {
    g.causal = {true};
    g.window_left = {-1};
    g.window_right = {-1};
    g.softcap = {0.0};
  }
  const TraceShape& sh = t.shape;
  if (sh.num_heads) {
    g.num_heads = {*sh.num_heads};
    g.gqa_ratio.clear();
  }
  if (sh.num_kv_heads) {
    g.num_kv_heads = {*sh.num_kv_heads};
  }
  if (sh.head_dim) {
    g.head_dim = {*sh.head_dim};
  }
  if (sh.block_size) {
    g.block_size = {*sh.block_size};
  }
  if (sh.dtype) {
    g.dtype = {*sh.dtype};
  }
  const char* missing = g.num_kv_heads.empty()                          ? "num_kv_heads"
                        : g.num_heads.empty() && g.gqa_ratio.empty()    ? "num_heads"
                        : g.head_dim.empty()                            ? "head_dim"
                        : g.block_size.empty()                          ? "block_size"
                        : g.dtype.empty()                               ? "dtype"
                                                                        : nullptr;
  if (missing != nullptr) {
    throw InputError("traffic trace " + t.path + ": neither its header's shape nor the profile's" +
                     " decode grid gives " + missing);
  }
  for (int kvh : g.num_kv_heads) {
    for (int h : g.num_heads) {
      if (h % kvh != 0) {
        throw InputError("traffic trace " + t.path + ": num_heads " + std::to_string(h) +
                         " is not a multiple of num_kv_heads " + std::to_string(kvh));
      }
    }
  }
  g.batch = {1};
  g.context_len = {1};
  g.context_lens.clear();
  g.length_mix.clear();
  Profile shapes;
  shapes.decode = g;
  std::vector<Workload> out;
  for (const Workload& shape : expand_workloads(shapes)) {
    for (const TrafficSample& s : sample) {
      Workload w = shape;
      w.set_decode_lens(s.batch.seq_lens);
      w.weight = s.batch.count;
      w.held_out = s.held_out;
      try {
        w.params.validate();
      } catch (const InputError& e) {
        throw InputError("traffic trace " + t.path + ": " + e.what());
      }
      out.push_back(std::move(w));
    }
  }
  return out;
}

std::vector<KernelConfig> configs_for(const Profile& p, const Backend& be, const Workload& w) {
  std::vector<Family> fams;
  if (w.phase == Phase::decode) {
    fams = {Family::decode_v1, Family::decode_v2};
  } else {
    fams = {Family::prefill};
  }
  std::vector<KernelConfig> out;
  for (Family f : fams) {
    auto it = p.configs.find(f);
    const auto list = it != p.configs.end() ? it->second : be.config_space(f, w.params);
    out.insert(out.end(), list.begin(), list.end());
  }
  return out;
}

} // namespace attn
