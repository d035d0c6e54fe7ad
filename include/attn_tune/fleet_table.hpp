// Header-only reader of attn-tune fleet tables (docs/sharding.md, section Fleet tables): one file
// holding the threshold tables of several GPU models, keyed by canonical device name. An engine
// includes this file, names the device it runs on (any alias: "NVIDIA H100 80GB HBM3", "H100-SXM",
// ...) and gets that device's ThresholdTableReader and the entry it came from.
#pragma once
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "threshold_table_reader.hpp"

namespace attn_tune {

inline constexpr const char* kFleetSchemaName = "attn-tune/fleet-table";
inline constexpr int kFleetSchemaVersion = 1;

// A device model attn-tune knows by name: its SM count and memory bandwidth (GB/s, vendor
// figures), what the nearest-device fallback compares.
struct KnownDevice {
  const char* name;
  int sm_count;
  double bandwidth_gbps;
};

inline const std::vector<KnownDevice>& known_devices() {
  static const std::vector<KnownDevice> k = {{"b200", 148, 8000},
                                             {"gh200", 132, 4000},
                                             {"h200", 132, 4800},
                                             {"h200-nvl", 132, 4800},
                                             {"h100-sxm", 132, 3350},
                                             {"h100-nvl", 132, 3900},
                                             {"h100-pcie", 114, 2000},
                                             {"h800-sxm", 132, 3350},
                                             {"h800-pcie", 114, 2000},
                                             {"h20", 78, 4000},
                                             {"a100-sxm4-80gb", 108, 2039},
                                             {"a100-sxm4-40gb", 108, 1555},
                                             {"a100-pcie-80gb", 108, 1935},
                                             {"a100-pcie-40gb", 108, 1555},
                                             {"a800-sxm4-80gb", 108, 2039},
                                             {"l40s", 142, 864},
                                             {"l40", 142, 864},
                                             {"l4", 58, 300},
                                             {"a40", 84, 696},
                                             {"a30", 56, 933},
                                             {"a10g", 80, 600},
                                             {"a10", 72, 600},
                                             {"t4", 40, 320},
                                             {"v100-sxm2", 80, 900},
                                             {"v100-pcie", 80, 900},
                                             {"rtx-4090", 128, 1008},
                                             {"rtx-6000-ada", 142, 960},
                                             {"mi300x", 304, 5300},
                                             {"mi250x", 220, 3277}};
  return k;
}

inline const KnownDevice* find_known_device(const std::string& canonical) {
  for (const auto& d : known_devices()) {
    if (canonical == d.name) {
      return &d;
    }
  }
  return nullptr;
}

namespace detail {
inline std::vector<std::string> name_tokens(const std::string& raw) {
  std::vector<std::string> out;
  std::string cur;
  for (const char ch : raw) {
    const auto c = static_cast<unsigned char>(ch);
    // Bytes of non-ASCII characters (UTF-8) are kept as they are: two names that differ only
    // there name different devices, never the same empty name.
    if (c >= 0x80) {
      cur += ch;
    } else if (std::isalnum(c) != 0) {
      cur += char(std::tolower(c));
    } else if (!cur.empty()) {
      out.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) {
    out.push_back(cur);
  }
  return out;
}
inline bool has(const std::vector<std::string>& t, const std::string& w) {
  for (const auto& x : t) {
    if (x == w) {
      return true;
    }
  }
  return false;
}
} // namespace detail

// The canonical name of a device model (docs/sharding.md, section "Fleet tables", lists the
// aliases): "NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB" and "H100-SXM" are all "h100-sxm";
// "NVIDIA H100 PCIe" is "h100-pcie"; A100s carry their form and memory ("a100-sxm4-80gb";
// `memory_bytes` decides the size when the name does not say; without either, "a100-sxm4"). Other
// names become their words in lower case joined by '-', without the vendor ("NVIDIA GeForce RTX
// 4090" -> "rtx-4090").
inline std::string canonical_device_name(const std::string& raw, int64_t memory_bytes = 0) {
  using detail::has;
  std::vector<std::string> t;
  for (auto& w : detail::name_tokens(raw)) {
    if (w != "nvidia" && w != "amd" && w != "geforce" && w != "tesla" && w != "instinct") {
      t.push_back(w);
    }
  }
  const bool pcie = has(t, "pcie");
  const bool nvl = has(t, "nvl");
  auto sized = [&](const std::string& base) {
    if (has(t, "80gb") || has(t, "80g")) {
      return base + "-80gb";
    }
    if (has(t, "40gb") || has(t, "40g")) {
      return base + "-40gb";
    }
    if (memory_bytes > 0) {
      return base + (memory_bytes > (int64_t(60) << 30) ? "-80gb" : "-40gb");
    }
    return base;
  };
  if (has(t, "gh200")) {
    return "gh200";
  }
  if (has(t, "h200")) {
    return nvl ? "h200-nvl" : "h200";
  }
  for (const char* h : {"h100", "h800"}) {
    if (has(t, h)) {
      return std::string(h) + (pcie ? "-pcie" : nvl ? "-nvl" : "-sxm");
    }
  }
  for (const char* a : {"a100", "a800"}) {
    if (has(t, a)) {
      return sized(std::string(a) + (pcie ? "-pcie" : "-sxm4"));
    }
  }
  if (has(t, "v100")) {
    return pcie ? "v100-pcie" : "v100-sxm2";
  }
  if (has(t, "rtx") && has(t, "6000") && has(t, "ada")) {
    return "rtx-6000-ada";
  }
  std::string s;
  for (const auto& w : t) {
    // Memory sizes and form words of single-form models say nothing more ("L40S 48GB").
    if (w.size() > 2 && (w.substr(w.size() - 2) == "gb") &&
        std::isdigit(static_cast<unsigned char>(w[0])) != 0) {
      continue;
    }
    s += (s.empty() ? "" : "-") + w;
  }
  return s;
}

// The fleet entry chosen for a device, and why.
struct FleetSelection {
  std::string device;    // the entry's canonical name
  std::string raw_name;  // the entry's device as it named itself
  bool exact = true;     // the queried device's own entry (false: the nearest one)
  double distance = 0.0; // the nearest entry's SM-count and bandwidth distance
  std::string said;      // one line saying which entry answers and why
  ThresholdTableReader table;
};

// Options of the choice: `nearest` allows the nearest entry by SM count and memory bandwidth
// when the device has none of its own; `sm_count` and `bandwidth_gbps` describe the device when
// it is not among known_devices().
struct FleetQuery {
  std::string device_name;
  bool nearest = false;
  int sm_count = 0;
  double bandwidth_gbps = 0.0;
};

class FleetTable {
public:
  explicit FleetTable(nlohmann::json fleet) : f_(std::move(fleet)) {
    if (!is_fleet(f_)) {
      throw std::runtime_error("not an attn-tune fleet table (schema is not \"" +
                               std::string(kFleetSchemaName) + "\")");
    }
    if (f_.value("version", 0) != kFleetSchemaVersion) {
      throw std::runtime_error("unsupported fleet table version " +
                               std::to_string(f_.value("version", 0)));
    }
    if (!f_.contains("devices") || !f_["devices"].is_array() || f_["devices"].empty()) {
      throw std::runtime_error("fleet table has no 'devices' list");
    }
    // One entry per device model, as `table combine` makes them: with two, which one answers
    // would be the file's order.
    const nlohmann::json& devs = f_["devices"];
    for (std::size_t i = 0; i < devs.size(); ++i) {
      if (!devs[i].is_object() || !devs[i].contains("device") || !devs[i]["device"].is_string()) {
        throw std::runtime_error("fleet table: devices[" + std::to_string(i) +
                                 "].device: expected a canonical device name (a string)");
      }
      for (std::size_t k = 0; k < i; ++k) {
        if (devs[k]["device"] == devs[i]["device"]) {
          throw std::runtime_error("fleet table: devices[" + std::to_string(i) +
                                   "].device: " + devs[i]["device"].get<std::string>() +
                                   " again (devices[" + std::to_string(k) +
                                   "] is it too); a fleet table holds one table per device model");
        }
      }
    }
  }
  [[nodiscard]] static bool is_fleet(const nlohmann::json& j) {
    return j.is_object() && j.contains("schema") && j["schema"] == kFleetSchemaName;
  }
  [[nodiscard]] const nlohmann::json& json() const { return f_; }
  [[nodiscard]] std::vector<std::string> device_names() const {
    std::vector<std::string> out;
    for (const auto& e : f_["devices"]) {
      out.push_back(e.value("device", ""));
    }
    return out;
  }

  // The entry for a device: its canonical name's own, else (only when asked) the nearest by SM
  // count and memory bandwidth. Throws std::out_of_range naming the entries there are.
  [[nodiscard]] FleetSelection select(const FleetQuery& q) const {
    const std::string want = canonical_device_name(q.device_name);
    const nlohmann::json* hit = nullptr;
    for (const auto& e : f_["devices"]) {
      if (e.value("device", "") == want) {
        hit = &e;
        break;
      }
    }
    if (hit == nullptr) {
      // A name without the memory size ("A100-SXM4") matches the one sized entry of its form
      // ("a100-sxm4-80gb"): the rest is a size, digits and "gb", never another model
      // ("h200" is not "h200-nvl", "rtx" not "rtx-4090").
      const auto sized_form = [&want](const std::string& d) {
        if (d.rfind(want + "-", 0) != 0 || d.size() < want.size() + 4) {
          return false;
        }
        const std::string rest = d.substr(want.size() + 1);
        return rest.ends_with("gb") && std::all_of(rest.begin(), rest.end() - 2,
                                                   [](char ch) { return ch >= '0' && ch <= '9'; });
      };
      const nlohmann::json* only = nullptr;
      int n = 0;
      for (const auto& e : f_["devices"]) {
        if (sized_form(e.value("device", ""))) {
          only = &e;
          ++n;
        }
      }
      if (n == 1) {
        hit = only;
      }
    }
    if (hit != nullptr) {
      return make(*hit, true, 0.0,
                  "fleet entry " + hit->value("device", "") + " (measured on " +
                      hit->value("raw_name", "") + ") for device '" + q.device_name + "'");
    }
    std::string have;
    for (const auto& n : device_names()) {
      have += (have.empty() ? "" : ", ") + n;
    }
    if (!q.nearest) {
      throw std::out_of_range("fleet table has no entry for '" + q.device_name + "' (" + want +
                              "); it has " + have +
                              " (ask for the nearest by SM count and bandwidth to use one)");
    }
    int sm = q.sm_count;
    double bw = q.bandwidth_gbps;
    if (const KnownDevice* k = find_known_device(want)) {
      sm = sm > 0 ? sm : k->sm_count;
      bw = bw > 0 ? bw : k->bandwidth_gbps;
    }
    if (sm <= 0 || bw <= 0) {
      throw std::out_of_range("fleet table has no entry for '" + q.device_name + "' (" + want +
                              ") and its SM count and memory bandwidth are unknown; give them "
                              "to pick the nearest of " +
                              have);
    }
    const nlohmann::json* best = nullptr;
    double best_d = 0.0;
    for (const auto& e : f_["devices"]) {
      const int esm = e.value("sm_count", 0);
      const double ebw = e.contains("bandwidth_gbps") && e["bandwidth_gbps"].is_number()
                             ? e["bandwidth_gbps"].get<double>()
                             : 0.0;
      if (esm <= 0 || ebw <= 0) {
        continue;
      }
      const double d = std::fabs(std::log2(double(esm) / sm)) + std::fabs(std::log2(ebw / bw));
      if (best == nullptr || d < best_d - kTieEpsilon) {
        best = &e;
        best_d = d;
      }
    }
    if (best == nullptr) {
      throw std::out_of_range("no entry of the fleet table records its SM count and bandwidth");
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", best_d);
    return make(*best, false, best_d,
                "no fleet entry for '" + q.device_name + "' (" + want + "); using the nearest, " +
                    best->value("device", "") + " (measured on " + best->value("raw_name", "") +
                    ", " + std::to_string(best->value("sm_count", 0)) + " SMs), distance " + buf);
  }

private:
  static FleetSelection make(const nlohmann::json& e, bool exact, double d, std::string said) {
    return FleetSelection{e.value("device", ""),
                          e.value("raw_name", ""),
                          exact,
                          d,
                          std::move(said),
                          ThresholdTableReader(e.at("table"))};
  }
  nlohmann::json f_;
};

// A threshold table or a fleet table, read for the device `q.device_name`: a fleet gives that
// device's entry (FleetTable::select); a single table is itself, and `said` notes when it was
// measured on another model. An empty device name takes a single table as it is and refuses a
// fleet (which device?).
inline FleetSelection open_table_for_device(const nlohmann::json& doc, const FleetQuery& q) {
  if (FleetTable::is_fleet(doc)) {
    if (q.device_name.empty()) {
      throw std::out_of_range("a fleet table needs the name of the device to read it for");
    }
    return FleetTable(doc).select(q);
  }
  ThresholdTableReader t(doc);
  const nlohmann::json dev = t.provenance().value("device", nlohmann::json::object());
  const std::string raw = dev.value("name", "");
  const std::string canon = canonical_device_name(raw, dev.value("memory_bytes", int64_t(0)));
  FleetSelection s{canon, raw, true, 0.0, "", std::move(t)};
  if (!q.device_name.empty() && canonical_device_name(q.device_name) != canon) {
    s.exact = false;
    s.said = "the table was measured on " + raw + " (" + canon + "), not on '" + q.device_name +
             "' (" + canonical_device_name(q.device_name) + ")";
  }
  return s;
}

} // namespace attn_tune
