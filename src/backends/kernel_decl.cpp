#include "src/backends/kernel_decl.h"

#include <unordered_set>

namespace attn {

const FamilyDecl* KernelSetDecl::family(Family f) const {
  for (const FamilyDecl& d : families) {
    if (d.family == f) {
      return &d;
    }
  }
  return nullptr;
}

std::vector<int> distinct_values(const std::vector<int>& values) {
  std::vector<int> out;
  std::unordered_set<int> seen;
  for (int v : values) {
    if (seen.insert(v).second) {
      out.push_back(v);
    }
  }
  return out;
}

std::vector<KernelConfig> declared_configs(const FamilyDecl& f) {
  // In time linear in the configurations made: each parameter's values without repeats, crossed
  // with configurations that are distinct already, cannot make a configuration twice.
  std::vector<KernelConfig> out{KernelConfig{f.family, {}}};
  for (const ParamSpace& p : f.params) {
    const std::vector<int> values = distinct_values(p.values);
    std::vector<KernelConfig> next;
    next.reserve(out.size() * values.size());
    for (const KernelConfig& c : out) {
      for (int v : values) {
        KernelConfig n = c;
        n.params[p.name] = v;
        next.push_back(std::move(n));
      }
    }
    out = std::move(next);
  }
  return out;
}

} // namespace attn
