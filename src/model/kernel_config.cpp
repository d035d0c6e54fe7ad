// Family names and the stable text and JSON forms of a kernel configuration.
#include "src/model/kernel_config.h"

#include <cstdint>

#include "src/io/json_fields.h"
#include "src/model/errors.h"

namespace attn {

const char* family_name(Family f) {
  switch (f) {
  case Family::decode_v2:
    return "decode_v2";
  case Family::prefill:
    return "prefill";
  default:
    return "decode_v1";
  }
}

Family parse_family(const std::string& name) {
  if (name == "decode_v1") {
    return Family::decode_v1;
  }
  if (name == "decode_v2") {
    return Family::decode_v2;
  }
  if (name == "prefill") {
    return Family::prefill;
  }
  throw InputError("unknown kernel family '" + name +
                   "' (expected decode_v1, decode_v2 or prefill)");
}

std::string KernelConfig::key() const {
  std::string s = family_name(family);
  s += "[";
  bool first = true;
  for (const auto& [k, v] : params) { // std::map: sorted by name, so the key is stable
    s += (first ? "" : ",") + k + "=" + std::to_string(v);
    first = false;
  }
  return s + "]";
}

nlohmann::json KernelConfig::to_json() const {
  return {{"family", family_name(family)}, {"params", params}};
}

KernelConfig KernelConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("family") || !j["family"].is_string()) {
    throw InputError("kernel configuration needs a string 'family'");
  }
  KernelConfig c;
  c.family = parse_family(j["family"].get<std::string>());
  if (j.contains("params")) {
    if (!j["params"].is_object()) {
      throw InputError("kernel configuration 'params' must be an object of integers");
    }
    for (const auto& [k, v] : j["params"].items()) {
      // Checked before the conversion: 2^40+7 must not become 7.
      if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT32_MAX) ||
          (!v.is_number_unsigned() && (v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX))) {
        throw InputError("kernel configuration parameter '" + k +
                         "' must be an integer of 32 bits, got " + JsonDoor::shown(v));
      }
      c.params[k] = v.get<int>();
    }
  }
  return c;
}

} // namespace attn
