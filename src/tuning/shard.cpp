#include "src/tuning/shard.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "src/model/dtype.h"
#include "src/model/errors.h"

namespace attn {

namespace {
// Flops per byte at which compute costs as much as reading the cache (a rough device balance:
// decode is bandwidth-bound, long prefill is compute-bound on every backend).
constexpr double kFlopsPerByte = 20.0;
// A launch, its validation and warm-up cost something even on a tiny shape.
constexpr double kPerConfigBytes = 1 << 20;

bool all_digits(const std::string& s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}
} // namespace

std::string ShardSpec::text() const { return std::to_string(index) + "/" + std::to_string(count); }

ShardSpec parse_shard(const std::string& text) {
  const std::size_t slash = text.find('/');
  const std::string i = slash == std::string::npos ? "" : text.substr(0, slash);
  const std::string n = slash == std::string::npos ? "" : text.substr(slash + 1);
  if (!all_digits(i) || !all_digits(n) || i.size() > 5 || n.size() > 5) {
    throw InputError("--shard '" + text + "': expected I/N, shard I of N counted from 0 (0/4 .. " +
                     "3/4)");
  }
  ShardSpec s{.index = std::stoi(i), .count = std::stoi(n)};
  if (s.count < 1 || s.count > kMaxShards) {
    throw InputError("--shard '" + text + "': N must be between 1 and " +
                     std::to_string(kMaxShards));
  }
  if (s.index >= s.count) {
    throw InputError("--shard '" + text + "': I counts from 0, so it must be below N (0 to " +
                     std::to_string(s.count - 1) + ")");
  }
  return s;
}

std::string shard_group_key(const Workload& w) {
  if (w.phase != Phase::decode || w.held_out) {
    return w.key();
  }
  Workload point = w;
  point.context_len = 0;
  return point.key();
}

double workload_cost(const Workload& w, int configs) {
  const AttnParams& p = w.params;
  const double elem = double(dtype_size(p.cache_dtype()));
  double kv_bytes = 0;
  double flops = 0;
  if (w.phase == Phase::decode) {
    kv_bytes = 2.0 * w.batch * w.context_len * p.num_kv_heads * p.head_dim * elem;
    flops = 4.0 * w.batch * p.num_heads * double(w.context_len) * p.head_dim;
  } else {
    kv_bytes = 2.0 * w.batch * w.k_len * p.num_kv_heads * p.head_dim * elem;
    // Causal prefill sees about half the (q, k) pairs of the q_len x k_len block.
    const double pairs = p.causal
                             ? double(w.q_len) * w.k_len - 0.5 * double(w.q_len) * (w.q_len - 1)
                             : double(w.q_len) * w.k_len;
    flops = 4.0 * w.batch * p.num_heads * pairs * p.head_dim;
  }
  return double(configs) * (kv_bytes + flops / kFlopsPerByte + kPerConfigBytes);
}

std::vector<int> assign_shards(const std::vector<Workload>& workloads,
                               const std::vector<int>& configs, int count) {
  if (count < 1) {
    throw InputError("a plan needs at least one shard");
  }
  std::map<std::string, double> group_cost;
  for (std::size_t i = 0; i < workloads.size(); ++i) {
    group_cost[shard_group_key(workloads[i])] += workload_cost(workloads[i], configs.at(i));
  }
  std::vector<std::pair<std::string, double>> groups(group_cost.begin(), group_cost.end());
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<double> load(std::size_t(count), 0.0);
  std::map<std::string, int> shard_of;
  for (const auto& [key, cost] : groups) {
    const auto lightest = std::min_element(load.begin(), load.end());
    *lightest += cost;
    shard_of[key] = int(lightest - load.begin());
  }
  std::vector<int> out;
  out.reserve(workloads.size());
  for (const auto& w : workloads) {
    out.push_back(shard_of.at(shard_group_key(w)));
  }
  return out;
}

} // namespace attn
