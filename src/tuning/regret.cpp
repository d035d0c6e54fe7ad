// The reference rules engines use today and the regret of any rule or configuration choice,
// counted only at points where both families were measured.
#include "src/tuning/regret.h"

#include <algorithm>

namespace attn {

RuleChoice vllm_rule(const DecodePoint& p) {
  const int parts = (p.context_len + 511) / 512;
  const bool use_v1 = p.context_len <= 8192 && (parts == 1 || p.batch * p.num_heads > 512);
  return {!use_v1, 512};
}

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
      {"vllm", "vLLM", RuleKind::hard_coded, vllm_rule},
      {"seed_engine", "seed engine", RuleKind::hard_coded, seed_engine_rule}};
  return rules;
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
  return c.family == Family::decode_v2 ? p.v2_time(c.get("partition", 512)) : p.v1_s;
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
