// The reference rules engines use today, which of them a table's kernels replace, and the regret
// of any rule or configuration choice, counted only at points where both families were measured.
#include "src/tuning/regret.h"

#include <algorithm>

namespace attn {

RuleChoice vllm_cuda_rule(const DecodePoint& p) {
  const int parts = (p.context_len + 511) / 512;
  const bool use_v1 = p.context_len <= 8192 && (parts == 1 || p.batch * p.num_heads > 512);
  return {!use_v1, 512};
}

RuleChoice vllm_cpu_rule(const DecodePoint&) { return {true, kKernelSplits}; }

RuleChoice seed_engine_rule(const DecodePoint& p) {
  const int parts = (p.context_len + 511) / 512;
  return {p.num_kv_heads * parts > 2 * 16, 512};
}

Rule fitted_rule(const RuleFit& fit) {
  return [fit](const DecodePoint& p) { return RuleChoice{fit.uses_v2(p), fit.partition}; };
}

const std::vector<EngineRule>& engine_rules() {
  static const std::vector<EngineRule> rules = {
      {"fitted_rule", "fitted rule", RuleKind::fitted},
      {"table_lookup", "table lookup", RuleKind::table_lookup},
      {"vllm_cuda", "vLLM CUDA", RuleKind::hard_coded, vllm_cuda_rule, "vllm-cuda", "vllm",
       "v1 when ctx <= 8192 and (one partition of 512 or num_seqs * num_heads > 512), else v2 "
       "with partition 512"},
      {"vllm_cpu", "vLLM CPU", RuleKind::hard_coded, vllm_cpu_rule, "vllm-cpu", "",
       "v2 (split-KV) always unless VLLM_CPU_ATTN_SPLIT_KV=0, its scheduler choosing the splits"},
      {"seed_engine", "seed engine", RuleKind::hard_coded, seed_engine_rule, "seed", "",
       "v2 with partition 512 when num_kv_heads * ceil(ctx / 512) > 2 * 16 SMs"}};
  return rules;
}

const EngineRule* engine_rule_declared(const std::string& declared) {
  for (const EngineRule& r : engine_rules()) {
    if (!declared.empty() && r.declared == declared) {
      return &r;
    }
  }
  return nullptr;
}

const EngineRule* own_engine_rule(const nlohmann::json& table) {
  if (!table.contains("provenance") || !table["provenance"].contains("kernels")) {
    return nullptr;
  }
  const nlohmann::json& k = table["provenance"]["kernels"];
  return k.is_object() && k.contains("engine_rule") && k["engine_rule"].is_string()
             ? engine_rule_declared(k["engine_rule"].get<std::string>())
             : nullptr;
}

std::vector<const EngineRule*> rules_listed(const EngineRule* own) {
  std::vector<const EngineRule*> out;
  for (const EngineRule& r : engine_rules()) {
    if (r.kind != RuleKind::hard_coded) {
      out.push_back(&r);
    }
  }
  if (own != nullptr) {
    out.push_back(own);
  }
  for (const EngineRule& r : engine_rules()) {
    if (r.kind == RuleKind::hard_coded && &r != own) {
      out.push_back(&r);
    }
  }
  return out;
}

std::string rule_label(const EngineRule& r, const EngineRule* own) {
  return &r == own ? r.name + " (the kernel set's own rule)" : r.name;
}

const nlohmann::json* stored_regret(const nlohmann::json& set, const EngineRule& r) {
  for (const std::string& key : {r.id, r.old_id}) {
    if (!key.empty() && set.is_object() && set.contains(key) && set[key].is_object()) {
      return &set[key];
    }
  }
  return nullptr;
}

Rule family_rule(const EngineRule& r, const Rule& fitted) {
  return r.kind == RuleKind::fitted ? fitted : Rule(r.choose);
}

nlohmann::json Regret::to_json() const {
  return {{"mean", mean}, {"worst", worst}, {"points", points}, {"beyond_noise", beyond_noise}};
}

// Relative slack so that a choice exactly at the noise bound is not counted through rounding.
constexpr double kNoiseSlack = 1e-9;

bool beyond_noise(const DecodePoint& p, double slowdown) {
  return slowdown > p.noise * (1.0 + kNoiseSlack) + kNoiseSlack;
}

double rule_time(const DecodePoint& p, const RuleChoice& c) {
  return c.v2 ? p.v2_time(c.partition) : p.v1_s;
}

double config_time(const DecodePoint& p, const KernelConfig& c) {
  auto it = p.by_config.find(c.key());
  if (it != p.by_config.end()) {
    return it->second;
  }
  return c.family == Family::decode_v2 ? p.v2_time(v2_partition(c)) : p.v1_s;
}

namespace {

void add_point(Regret& r, double& sum, const DecodePoint& p, double chosen_s) {
  const double s = slowdown(chosen_s, p.best_s);
  sum += s;
  r.worst = std::max(r.worst, s);
  r.beyond_noise += beyond_noise(p, s) ? 1 : 0;
  ++r.points;
}

} // namespace

Regret regret_of(const std::vector<DecodePoint>& pts, const Rule& rule) {
  Regret r;
  double sum = 0.0;
  for (const auto& p : pts) {
    if (!p.usable()) {
      continue;
    }
    add_point(r, sum, p, rule_time(p, rule(p)));
  }
  r.mean = r.points ? sum / r.points : 0.0;
  return r;
}

Regret regret_of_configs(const std::vector<DecodePoint>& pts,
                         const std::function<KernelConfig(std::size_t)>& pick) {
  Regret r;
  double sum = 0.0;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const DecodePoint& p = pts[i];
    if (!p.usable()) {
      continue;
    }
    add_point(r, sum, p, config_time(p, pick(i)));
  }
  r.mean = r.points ? sum / r.points : 0.0;
  return r;
}

} // namespace attn
