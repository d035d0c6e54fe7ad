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
  // An fp8 cache's scales (params.kv_dtype fp8): empty (1), per tensor or per KV head.
  std::vector<float> k_scale;
  std::vector<float> v_scale;
  // NaN in the slots past each sequence's length in its last block (GenOptions::nan_tails).
  bool nan_tails = false;
  // A block size verify probes on its own account (not a power of two): a configuration that
  // refuses it is left out of the case, not counted as skipped (a v2 partition of 512 cannot
  // be a multiple of 48).
  bool probed_size = false;

  [[nodiscard]] Problem make() const;
  [[nodiscard]] std::string name() const { return group + "#" + std::to_string(index); }
};

// What verify aims at in one kernel set (kernel_targets.h finds it): the values the set declares
// and the block and head sizes its configurations accept.
struct KernelTargets {
  // decode_v2's declared "partition" values; empty: 256, 512, 1024, unless v2 chooses its splits
  std::vector<int> partitions;
  // decode_v2 declares no "partition" (the kernel chooses its splits): no partition boundaries
  // to aim at, so no partition group; the edges stay at block boundaries and long contexts.
  bool kernel_splits = false;
  std::vector<int> q_tiles;     // prefill's declared "q_tile" values
  std::vector<int> k_tiles;     // prefill's declared "k_tile" values
  std::vector<int> block_sizes; // accepted by some configuration; empty: not known
  // The block sizes the one-size groups (GQA, masks, shared prefix, long contexts, chunked,
  // tiles, ...) run at, so that every configuration gets them at a size it accepts: the first
  // keeps the groups' plain names, each other adds "-bsN" (a set whose configurations want 16
  // and 32 alike gets both). Empty: 16 where accepted, else the smallest accepted.
  std::vector<int> home_block_sizes;
  std::vector<int> head_dims;   // likewise
  // The fp8 KV-cache dtypes some family of the phase reads (FamilyDecl::fp8_kv): their fp8
  // groups run.
  std::vector<DType> fp8;
  // Where can_run accepts what the plugin contract says it should refuse: a decode_v2 partition
  // that the block size does not divide. verify says these; they fail nothing by themselves.
  std::vector<std::string> contract_notes;
};

// The edge cases of SPEC.md for one phase and dtype, aimed at a kernel set's targets: lengths at
// k*P-1, k*P, k*P+1 (k = 1, 2) for every partition P (none where the kernel chooses its splits),
// one ragged batch per partition mixing them,
// query and key lengths around every declared tile, lengths ending on a block boundary and one
// past it, for every accepted block size that is not a power of two and the intensity's share of
// the others. Intensity scales the count of the other cases; it never drops a declared value.
// Where the set reads fp8 caches, the groups fp8-e4m3 and fp8-e5m2 run the query dtype over
// such caches: scales per tensor and per KV head, 1 and far from it (values near saturation and
// in the subnormals), across block and partition edges, GQA, masks and (prefill) chunks.
// Case seeds depend only on (seed, group, index), so that filtering families or dtypes never
// changes what a given seed reproduces for the same kernel set.
[[nodiscard]] std::vector<VerifyCase> verify_cases(Phase phase, DType dtype, Intensity intensity,
                                                   uint64_t seed,
                                                   const KernelTargets& aim = {});

} // namespace attn
