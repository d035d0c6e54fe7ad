// Finding what verify aims at in a kernel set (kernel_targets.h).
#include "src/validation/kernel_targets.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "src/model/problem_gen.h"

namespace attn {

namespace {

// Every value the phase's declared families give the parameter `name`, sorted, unique.
std::vector<int> declared_values(const KernelSetDecl& decl, Phase phase, const char* name) {
  std::set<int> out;
  for (const FamilyDecl& f : decl.families) {
    if (family_is_decode(f.family) != (phase == Phase::decode)) {
      continue;
    }
    for (const ParamSpace& p : f.params) {
      if (p.name == name) {
        out.insert(p.values.begin(), p.values.end());
      }
    }
  }
  return {out.begin(), out.end()};
}

// The configurations of the phase's families (by key) that accept a small problem of this shape,
// as far as the set can tell without building them (can_run_unbuilt: every size of every
// configuration, which the CUDA backend would otherwise compile one by one).
std::vector<KernelConfig> accepted_configs(const Backend& be, Phase phase, DType dt, int block_size,
                                           int head_dim) {
  AttnParams p;
  p.dtype = dt;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = head_dim;
  p.block_size = block_size;
  GenOptions g;
  g.pool_factor = 1.0;
  const Problem pr = phase == Phase::decode ? make_decode_problem(p, {1}, g)
                                            : make_prefill_problem(p, {1}, {1}, g);
  std::vector<KernelConfig> out;
  for (const FamilyDecl& f : be.declaration().families) {
    if (family_is_decode(f.family) != (phase == Phase::decode)) {
      continue;
    }
    for (const KernelConfig& cfg : be.config_space(f.family, p)) {
      if (!be.can_run_unbuilt(cfg, pr)) {
        out.push_back(cfg);
      }
    }
  }
  return out;
}

std::set<std::string> keys_of(const std::vector<KernelConfig>& cfgs) {
  std::set<std::string> out;
  for (const KernelConfig& c : cfgs) {
    out.insert(c.key());
  }
  return out;
}

std::set<std::string> accepting(const Backend& be, Phase phase, DType dt, int block_size,
                                int head_dim) {
  return keys_of(accepted_configs(be, phase, dt, block_size, head_dim));
}

bool accepts(const Backend& be, Phase phase, DType dt, int block_size, int head_dim) {
  return !accepting(be, phase, dt, block_size, head_dim).empty();
}

} // namespace

std::vector<int> home_block_sizes(const std::vector<std::pair<int, std::set<std::string>>>& by_size) {
  std::set<std::string> uncovered;
  for (const auto& [bs, keys] : by_size) {
    uncovered.insert(keys.begin(), keys.end());
  }
  std::vector<int> homes;
  while (!uncovered.empty()) {
    int best = 0;
    std::size_t best_count = 0;
    for (const auto& [bs, keys] : by_size) {
      std::size_t n = 0;
      for (const std::string& k : keys) {
        n += uncovered.count(k);
      }
      if (n > best_count) { // the first listed wins a tie
        best = bs;
        best_count = n;
      }
    }
    if (best_count == 0) {
      break;
    }
    homes.push_back(best);
    for (const auto& [bs, keys] : by_size) {
      if (bs == best) {
        for (const std::string& k : keys) {
          uncovered.erase(k);
        }
      }
    }
  }
  return homes;
}


std::vector<int> candidate_block_sizes(const std::vector<int>& partitions) {
  // 48: one size that is not a power of two, whatever the partitions, so that a kernel finding
  // its block by shift and mask is caught wherever it accepts one.
  std::set<int> out = {8, 16, 32, 48, 64, 128};
  for (int part : partitions) {
    for (int bs = 8; bs <= 256 && bs <= part; bs += 8) {
      if (part % bs == 0) {
        out.insert(bs);
      }
    }
  }
  return {out.begin(), out.end()};
}

std::vector<int> candidate_head_dims() { return {32, 64, 80, 96, 112, 128, 160, 192, 256}; }

KernelTargets kernel_targets(const Backend& be, Phase phase, DType dt) {
  KernelTargets t;
  const KernelSetDecl& decl = be.declaration();
  if (phase == Phase::decode) {
    t.partitions = declared_values(decl, phase, "partition");
    const FamilyDecl* v2 = decl.family(Family::decode_v2);
    t.kernel_splits = v2 != nullptr && t.partitions.empty();
  } else {
    t.q_tiles = declared_values(decl, phase, "q_tile");
    t.k_tiles = declared_values(decl, phase, "k_tile");
  }
  const bool declares_phase =
      std::any_of(decl.families.begin(), decl.families.end(), [&](const FamilyDecl& f) {
        return family_is_decode(f.family) == (phase == Phase::decode);
      });
  if (!declares_phase) {
    return t; // nothing of this phase runs: its cases are skipped with the set's reasons
  }
  for (DType kv : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    if (std::any_of(decl.families.begin(), decl.families.end(), [&](const FamilyDecl& f) {
          return f.reads_kv(kv) && family_is_decode(f.family) == (phase == Phase::decode);
        })) {
      t.fp8.push_back(kv);
    }
  }
  const std::vector<int> blocks = candidate_block_sizes(t.partitions);
  const std::vector<int> dims = candidate_head_dims();
  // One accepted shape to vary around: the usual sizes first.
  int bs0 = 0;
  int d0 = 0;
  for (int d : {128, 64, 256, 96, 80, 112, 160, 192, 32}) {
    for (int bs : {16, 32, 64, 8, 128}) {
      if (bs0 == 0 && accepts(be, phase, dt, bs, d)) {
        bs0 = bs;
        d0 = d;
      }
    }
  }
  if (bs0 == 0) {
    // Nothing usual runs: try every candidate pair before giving up (then every case is
    // skipped with the kernel's own reasons, as before).
    for (int d : dims) {
      for (int bs : blocks) {
        if (bs0 == 0 && accepts(be, phase, dt, bs, d)) {
          bs0 = bs;
          d0 = d;
        }
      }
    }
  }
  if (bs0 == 0) {
    return t;
  }
  // Which configurations accept each candidate block size (at d0), the usual sizes first.
  std::map<int, std::set<std::string>> keys_by_size;
  for (int bs : blocks) {
    const std::vector<KernelConfig> cfgs = accepted_configs(be, phase, dt, bs, d0);
    for (const KernelConfig& c : cfgs) {
      // SPEC.md's partitions are multiples of the block size; docs/plugins.md asks can_run to
      // refuse a call where they are not. Said, not failed: the answer may still be right.
      const int part = c.get("partition", 0);
      if (c.family == Family::decode_v2 && part > 0 && part % bs != 0) {
        t.contract_notes.push_back(
            c.key() + " accepts block_size " + std::to_string(bs) +
            ", which does not divide its "
            "partition " +
            std::to_string(part) +
            ": partitions are multiples of the block size "
            "(SPEC.md); can_run should refuse such a call (docs/plugins.md)");
      }
    }
    std::set<std::string> keys = keys_of(cfgs);
    if (!keys.empty()) {
      t.block_sizes.push_back(bs);
      keys_by_size.emplace(bs, std::move(keys));
    }
  }
  std::vector<std::pair<int, std::set<std::string>>> by_size;
  for (int bs : {16, 32, 64, 8, 128}) {
    if (auto it = keys_by_size.find(bs); it != keys_by_size.end()) {
      by_size.emplace_back(bs, std::move(it->second));
      keys_by_size.erase(it);
    }
  }
  for (auto& [bs, keys] : keys_by_size) {
    by_size.emplace_back(bs, std::move(keys));
  }
  t.home_block_sizes = home_block_sizes(by_size);
  for (int d : dims) {
    for (int bs : t.home_block_sizes) {
      if (accepts(be, phase, dt, bs, d)) {
        t.head_dims.push_back(d);
        break;
      }
    }
  }
  return t;
}

} // namespace attn
