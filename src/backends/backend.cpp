// The contract's shared part: configuration spaces from the declarations, the checks every set
// makes before its own, the rearrangement into a family's declared layout; DeviceInfo as JSON.
#include "src/backends/backend.h"

#include <algorithm>
#include <utility>

#include "src/model/errors.h"

namespace attn {

std::optional<std::string> phase_mismatch(Family f, Phase ph) {
  if (family_is_decode(f) == (ph == Phase::decode)) {
    return std::nullopt;
  }
  return std::string(family_name(f)) + " runs " + (family_is_decode(f) ? "decode" : "prefill") +
         " problems, not " + phase_name(ph) + " problems";
}

std::string guard_overrun(const unsigned char* after_out, const unsigned char* after_lse) {
  const auto changed = [](const unsigned char* b) {
    return std::size_t(std::count_if(b, b + kOutputGuardBytes,
                                     [](unsigned char c) { return c != kOutputGuardByte; }));
  };
  std::string said;
  for (const auto& [guard, what] : {std::pair{after_out, "out"}, std::pair{after_lse, "lse"}}) {
    if (const std::size_t n = changed(guard); n > 0) {
      said += (said.empty() ? "" : ", ") + std::to_string(n) + " of the " +
              std::to_string(kOutputGuardBytes) + " bytes after " + what + " changed";
    }
  }
  return said;
}

nlohmann::json kernels_provenance(const Backend& be) {
  nlohmann::json k = be.kernels();
  k["engine_rule"] = be.declaration().engine_rule;
  return k;
}

std::vector<KernelConfig> Backend::config_space(Family f, const AttnParams& p) const {
  std::vector<KernelConfig> out;
  const FamilyDecl* fam = declaration().family(f);
  if (fam == nullptr) {
    return out;
  }
  for (KernelConfig& c : declared_configs(*fam)) {
    if (offers(c, p)) {
      out.push_back(std::move(c));
    }
  }
  return out;
}

std::optional<std::string> Backend::can_run(const KernelConfig& cfg, const Problem& pr) const {
  if (auto why = contract_refusal(cfg, pr)) {
    return why;
  }
  return refuse(cfg, pr);
}

std::optional<std::string> Backend::can_run_unbuilt(const KernelConfig& cfg,
                                                    const Problem& pr) const {
  if (auto why = contract_refusal(cfg, pr)) {
    return why;
  }
  return refuse_unbuilt(cfg, pr);
}

std::optional<std::string> Backend::contract_refusal(const KernelConfig& cfg,
                                                     const Problem& pr) const {
  if (auto why = phase_mismatch(cfg.family, pr.phase)) {
    return why;
  }
  const KernelSetDecl& decl = declaration();
  const FamilyDecl* fam = decl.family(cfg.family);
  if (fam == nullptr) {
    return refuser() + " does not implement " + family_name(cfg.family);
  }
  const DType cache = pr.params.cache_dtype();
  if (!fam->reads_kv(cache)) {
    return refuser() + "'s " + family_name(cfg.family) + " does not read " +
           std::string(dtype_name(cache)) + " KV caches";
  }
  if (fam->layout == KvLayout::vllm) {
    const int x = vllm_x(cache);
    if (pr.params.head_dim % x != 0) {
      return "the vllm layout needs head_dim to be a multiple of " + std::to_string(x) +
             " (16 bytes of " + std::string(dtype_name(cache)) + "), not " +
             std::to_string(pr.params.head_dim);
    }
  }
  return std::nullopt;
}

std::unique_ptr<PreparedRun> Backend::prepare(const Problem& pr, const KernelConfig& cfg) {
  pr.validate();
  if (auto why = can_run(cfg, pr)) {
    throw InputError("cannot run " + cfg.key() + " on " + refuser() + ": " + *why);
  }
  const FamilyDecl& fam = *declaration().family(cfg.family);
  if (pr.kv_layout == fam.layout) {
    return make_run(pr, cfg, fam);
  }
  return make_run(with_kv_layout(pr, fam.layout), cfg, fam);
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
