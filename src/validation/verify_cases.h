// verify's edge-case catalogue: the SPEC.md edges (block and partition boundaries, empty
// contexts, GQA ratios, every mask option, shared prefixes, long contexts) as groups of problems
// per phase and dtype, each described by its shape so that it can be rebuilt from its seed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "src/model/problem.h"

namespace attn {

enum class Intensity { quick, standard, full };
[[nodiscard]] Intensity parse_intensity(const std::string& s); // quick|default|full

// One problem of a case group, described by its shape so that it can be rebuilt from its seed.
struct VerifyCase {
  std::string group; // "decode/edges", "prefill/chunked", ...
  int index = 0;     // position in its group
  uint64_t seed = 0; // derived from the run's seed, the group and the index
  Phase phase = Phase::decode;
  AttnParams params;
  std::vector<int> q_lens; // prefill only
  std::vector<int> k_lens; // context lengths (decode) or key lengths (prefill)
  bool shared_prefix = false;

  [[nodiscard]] Problem make() const;
  [[nodiscard]] std::string name() const { return group + "#" + std::to_string(index); }
};

// The edge cases of SPEC.md for one phase and dtype. Case seeds depend only on (seed, group,
// index), so that filtering families or dtypes never changes what a given seed reproduces.
[[nodiscard]] std::vector<VerifyCase> verify_cases(Phase phase, DType dtype, Intensity intensity,
                                                   uint64_t seed);

} // namespace attn
