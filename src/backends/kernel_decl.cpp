#include "src/backends/kernel_decl.h"

#include <algorithm>

namespace attn {

const FamilyDecl* KernelSetDecl::family(Family f) const {
  for (const FamilyDecl& d : families) {
    if (d.family == f) {
      return &d;
    }
  }
  return nullptr;
}

std::vector<KernelConfig> declared_configs(const FamilyDecl& f) {
  std::vector<KernelConfig> out{KernelConfig{f.family, {}}};
  for (const ParamSpace& p : f.params) {
    std::vector<KernelConfig> next;
    for (const KernelConfig& c : out) {
      for (int v : p.values) {
        KernelConfig n = c;
        n.params[p.name] = v;
        if (std::find(next.begin(), next.end(), n) == next.end()) {
          next.push_back(std::move(n));
        }
      }
    }
    out = std::move(next);
  }
  return out;
}

} // namespace attn
