// DeviceInfo as JSON, and run_once, the validate step every caller of a backend shares.
#include "src/backends/backend.h"

namespace attn {

std::optional<std::string> phase_mismatch(Family f, Phase ph) {
  if (family_is_decode(f) == (ph == Phase::decode)) {
    return std::nullopt;
  }
  return std::string(family_name(f)) + " runs " + (family_is_decode(f) ? "decode" : "prefill") +
         " problems, not " + phase_name(ph) + " problems";
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

RunOutput run_once(Backend& be, const Problem& pr, const KernelConfig& cfg) {
  auto run = be.prepare(pr, cfg);
  run->poison_outputs();
  run->run();
  return run->download();
}

} // namespace attn
