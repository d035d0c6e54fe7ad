#include "src/backends/backend.h"

#include "src/backends/cpu/cpu_info.h"
#include "src/backends/cuda/cuda_devices.h"
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
      if (!v.is_number_integer()) {
        throw InputError("kernel configuration parameter '" + k + "' must be an integer");
      }
      c.params[k] = v.get<int>();
    }
  }
  return c;
}

nlohmann::json DeviceInfo::to_json() const {
  nlohmann::json j = {{"backend", backend},
                      {"id", id},
                      {"name", name},
                      {"memory_bytes", memory_bytes},
                      {"l2_bytes", l2_bytes}};
  if (backend == "cuda") {
    j["uuid"] = uuid;
    j["sm_count"] = sm_count;
    j["compute_capability"] = std::to_string(cc_major) + "." + std::to_string(cc_minor);
    j["driver_version"] = driver_version;
    j["runtime_version"] = runtime_version;
  } else {
    j["threads"] = threads;
  }
  return j;
}

DeviceList list_devices(const BackendOptions& opt) {
  DeviceList l;
  l.devices = cuda_devices(l.why_no_gpu);
  l.devices.push_back(cpu_device_info(opt.threads));
  return l;
}

DeviceChoice default_device(const BackendOptions& opt) {
  const DeviceList l = list_devices(opt);
  for (const auto& d : l.devices) {
    if (d.backend == "cuda") {
      return {d.id, "no --device given: using GPU 0 (" + d.name + ")"};
    }
  }
  return {"cpu", "no --device given: using the CPU backend (no GPU: " +
                     (l.why_no_gpu.empty() ? std::string("none found") : l.why_no_gpu) + ")"};
}

RunOutput run_once(Backend& be, const Problem& pr, const KernelConfig& cfg) {
  auto run = be.prepare(pr, cfg);
  run->poison_outputs();
  run->run();
  return run->download();
}

} // namespace attn
