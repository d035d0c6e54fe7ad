// Kernel families and one kernel configuration (a family plus named integer parameters): the
// vocabulary that backends, profiles, results files and threshold tables share.
#pragma once
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace attn {

enum class Family { decode_v1, decode_v2, prefill };
[[nodiscard]] const char* family_name(Family f);
[[nodiscard]] Family parse_family(const std::string& name); // throws InputError
[[nodiscard]] inline bool family_is_decode(Family f) { return f != Family::prefill; }

// A kernel family plus its configuration parameters, by name. Parameter names in use:
//   partition  (decode_v2) tokens per partition, a multiple of block_size
//   split      0: work split per query head, 1: per KV head (one K/V pass serves the group)
//   threads    threads per block (CUDA), q_tile / k_tile (prefill tiles), warps, stages, vec
struct KernelConfig {
  Family family = Family::decode_v1;
  std::map<std::string, int> params;

  [[nodiscard]] int get(const std::string& name, int fallback) const {
    auto it = params.find(name);
    return it == params.end() ? fallback : it->second;
  }
  // "decode_v2[partition=512,split=1]": stable, sorted; used as a key in results and tables.
  [[nodiscard]] std::string key() const;
  [[nodiscard]] nlohmann::json to_json() const;
  [[nodiscard]] static KernelConfig from_json(const nlohmann::json& j); // throws InputError
  bool operator==(const KernelConfig&) const = default;
};

} // namespace attn
