#include "src/tuning/fleet.h"

#include <fstream>
#include <map>

#include "include/attn_tune/fleet_table.hpp"
#include "src/model/errors.h"
#include "src/tuning/table_schema.h"

namespace attn {

using nlohmann::json;

json load_table_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    throw InputError("cannot read threshold table '" + path + "'");
  }
  try {
    return json::parse(f);
  } catch (const json::parse_error&) {
    throw InputError("'" + path + "' is not valid JSON");
  }
}

json combine_fleet(const std::vector<std::string>& files) {
  json devices = json::array();
  std::map<std::string, std::string> from; // canonical name -> the file it came from
  auto add = [&](const json& table, const std::string& file) {
    try {
      validate_table(table);
    } catch (const InputError& e) {
      throw InputError("'" + file + "': " + e.what());
    }
    const json dev = table.at("provenance").at("device");
    const std::string raw = dev.value("name", "");
    const std::string canon =
        attn_tune::canonical_device_name(raw, dev.value("memory_bytes", int64_t(0)));
    if (const auto it = from.find(canon); it != from.end()) {
      throw InputError("'" + file + "' and '" + it->second + "' are both tables of " + canon +
                       " (" + raw + "); a fleet file holds one table per device model");
    }
    from[canon] = file;
    const attn_tune::KnownDevice* known = attn_tune::find_known_device(canon);
    const int sm = dev.value("sm_count", known != nullptr ? known->sm_count : 0);
    json e = {{"device", canon},
              {"raw_name", raw},
              {"backend", dev.value("backend", "")},
              {"sm_count", sm},
              {"bandwidth_gbps", known != nullptr ? json(known->bandwidth_gbps) : json(nullptr)},
              {"source", file},
              {"table", table}};
    devices.push_back(std::move(e));
  };
  for (const auto& file : files) {
    const json doc = load_table_json(file);
    if (attn_tune::FleetTable::is_fleet(doc)) {
      for (const auto& e : doc.value("devices", json::array())) {
        add(e.at("table"), file);
      }
    } else {
      add(doc, file);
    }
  }
  return {{"schema", attn_tune::kFleetSchemaName},
          {"version", attn_tune::kFleetSchemaVersion},
          {"devices", devices}};
}

} // namespace attn
