// Fleet tables (docs/sharding.md, section Fleet tables): threshold tables of different GPU
// models joined into one file keyed by canonical device name, which engines read through
// include/attn_tune/fleet_table.hpp. `table combine` is this unit's front end.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace attn {

// A table or fleet file as JSON; InputError naming the file when it cannot be read or parsed.
[[nodiscard]] nlohmann::json load_table_json(const std::string& path);

// Checks a fleet table at the door: its schema and version, and every entry (device name, SM
// count, bandwidth, and its table against the table schema); InputError naming the file, the
// entry and the field.
void validate_fleet(const nlohmann::json& doc, const std::string& file);

// One fleet entry per table (a fleet file given as input adds its entries), keyed by canonical
// device name, each remembering the file it came from ("source"); every table is checked
// against the schema, and two tables of one device model are refused (InputError).
[[nodiscard]] nlohmann::json combine_fleet(const std::vector<std::string>& files);

} // namespace attn
