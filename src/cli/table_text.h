// The human text `attn-tune table show` prints for a threshold table: where it was measured, the
// fitted rule, the regret of each rule, and each shape point's crossover and best configurations.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace attn::cli {

// The summary of a table that passed validate_table (fields it needs are read with at()).
[[nodiscard]] std::string describe_table(const nlohmann::json& table);

} // namespace attn::cli
