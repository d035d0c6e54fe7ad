// The schema check of a threshold table, versions 1 to 5 (docs/threshold-table.md), run before
// a table is shown and by the tests on every table they build.
#pragma once
#include <nlohmann/json.hpp>

namespace attn {

// Checks a table against the schema of its version (1 to 4; others are refused) in
// docs/threshold-table.md; throws InputError naming the first missing or mistyped field
// ("decode[3].measured[0].best.median_s: missing").
void validate_table(const nlohmann::json& table);

} // namespace attn
