// The kernel contract's declarations: what a kernel set (the built-in CPU or CUDA kernels, a
// plugin, Python kernels) says about itself before anything runs. Every set declares the same
// way, so configuration spaces, layouts and lse checks follow from one description.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "src/model/dtype.h"
#include "src/model/kernel_config.h"
#include "src/model/kv_layout.h"

namespace attn {

// One tunable parameter and the values the tuner tries, in the order it tries them.
struct ParamSpace {
  std::string name;
  std::vector<int> values;
};

// One family a kernel set implements.
struct FamilyDecl {
  Family family = Family::decode_v1;
  KvLayout layout = KvLayout::HND; // the layout its caches arrive in
  bool writes_lse = true;          // false: its lse is not checked
  std::vector<ParamSpace> params;  // in declaration order
  // The fp8 KV-cache dtypes it reads (fp8_e4m3, fp8_e5m2, with their scales: SPEC.md "fp8 KV
  // caches"); it is never handed an fp8 cache of another one. Caches of the query's dtype are
  // read by every family.
  std::vector<DType> fp8_kv{};
  [[nodiscard]] bool reads_kv(DType cache) const {
    return !is_fp8(cache) || std::find(fp8_kv.begin(), fp8_kv.end(), cache) != fp8_kv.end();
  }
};

// Where a kernel set's kernels read and write.
enum class MemoryKind { host, cuda };

struct KernelSetDecl {
  std::string name; // "attn-tune" for the built-in kernels, else the plugin's own name
  MemoryKind memory = MemoryKind::host;
  std::vector<FamilyDecl> families;
  // The engine dispatch rule these kernels replace ("vllm-cuda", "vllm-cpu", "seed"; "" for
  // none): what regret, `table show` and the report compare the tuned table against.
  std::string engine_rule;

  // The family as declared; nullptr when the set does not implement `f`.
  [[nodiscard]] const FamilyDecl* family(Family f) const;
};

// Every combination of the family's declared values, the first parameter varying slowest
// (a value listed twice is tried once); one configuration without parameters when it declares
// none.
[[nodiscard]] std::vector<KernelConfig> declared_configs(const FamilyDecl& f);
// `values` without repeats, in the order they first appear.
[[nodiscard]] std::vector<int> distinct_values(const std::vector<int>& values);
// The most configurations one family may declare (the product of its parameters' distinct
// value counts): a declaration beyond it is refused rather than built.
inline constexpr int64_t kMaxDeclaredConfigs = 100'000;

} // namespace attn
