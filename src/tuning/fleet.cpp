#include "src/tuning/fleet.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "include/attn_tune/fleet_table.hpp"
#include "src/io/json_fields.h"
#include "src/io/json_unique.h"
#include "src/model/errors.h"
#include "src/tuning/table_schema.h"

namespace attn {

using nlohmann::json;

json load_table_json(const std::string& path) {
  // A sweep's --out folder stands for its table, as `report` takes it.
  std::string file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    file = (std::filesystem::path(path) / "threshold_table.json").string();
    if (!std::filesystem::is_regular_file(file, ec)) {
      throw InputError("'" + path +
                       "' is a folder without a threshold_table.json (give a sweep's "
                       "--out folder or a table file)");
    }
  }
  std::ifstream f(file);
  if (!f) {
    throw InputError("cannot read threshold table '" + file + "'");
  }
  try {
    // A key given twice would be read as its last value in silence: a hand edit gone wrong.
    return parse_json_unique_keys(std::string(std::istreambuf_iterator<char>(f), {}));
  } catch (const DuplicateKey& e) {
    throw InputError("'" + file + "': " + e.what());
  } catch (const JsonTooDeep& e) {
    throw InputError("'" + file + "' is not a threshold table: " + e.what());
  } catch (const json::exception&) {
    throw InputError("'" + file + "' is not valid JSON");
  } catch (const std::exception& e) { // a read that fails part way (not a regular file)
    throw InputError("cannot read threshold table '" + file + "' (" + e.what() + ")");
  }
}

void validate_fleet(const json& doc, const std::string& file) {
  try {
    (void)attn_tune::FleetTable(doc);
  } catch (const std::exception& e) {
    throw InputError("'" + file + "': " + e.what());
  }
  const json& devices = doc["devices"];
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const JsonDoor door("'" + file + "'");
    const std::string at = "devices[" + std::to_string(i) + "]";
    const json& e = door.object(devices[i], at);
    if (door.text(e, at, "device").empty()) {
      door.fail(at + ".device", "expected a canonical device name, got \"\"");
    }
    (void)door.text_or(e, at, "raw_name", "");
    (void)door.text_or(e, at, "backend", "");
    (void)door.text_or(e, at, "source", "");
    (void)door.integer_or(e, at, "sm_count", 0, 1 << 20, 0);
    if (e.contains("bandwidth_gbps") && !e["bandwidth_gbps"].is_null()) {
      (void)door.number(e["bandwidth_gbps"], at + ".bandwidth_gbps", 1e-9, 1e12);
    }
    try {
      validate_table(door.object(door.field(e, at, "table"), at + ".table"));
    } catch (const InputError& ex) {
      throw InputError("'" + file + "': " + at + ": " + ex.what());
    }
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
      validate_fleet(doc, file);
      for (const auto& e : doc["devices"]) {
        add(e["table"], file);
      }
    } else {
      add(doc, file);
    }
  }
  if (devices.empty()) {
    throw InputError("no tables to combine: a fleet table needs at least one device");
  }
  return {{"schema", attn_tune::kFleetSchemaName},
          {"version", attn_tune::kFleetSchemaVersion},
          {"devices", devices}};
}

} // namespace attn
