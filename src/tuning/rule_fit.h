// Fitting the compact rule `v2 when tiles > k * sm_count` to the decode points of a sweep: the
// tiles definition, partition and k with the least total regret (the table's `rule` field).
// Where v2 chooses its own splits (kKernelSplits) there are no partitions to count: its tiles
// count context_len in their place ("batch*num_kv_heads*context_len").
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/tuning/decode_point.h"

namespace attn {

// How tiles are counted in `v2 when tiles > k * sm_count`, partitions = ceil(ctx / partition),
// or context_len for a v2 that chooses its own splits (partition kKernelSplits).
enum class TilesDef { batch_kv_heads_parts, batch_heads_parts, kv_heads_parts, heads_parts };
// "batch*num_kv_heads*partitions", or "batch*num_kv_heads*context_len" for kKernelSplits.
[[nodiscard]] std::string tiles_name(TilesDef d, int partition);
[[nodiscard]] double count_tiles(TilesDef d, const DecodePoint& p, int partition);

struct RuleFit {
  TilesDef tiles = TilesDef::batch_kv_heads_parts;
  double k = 0.0;
  int partition = 512; // what v2 launches with; kKernelSplits: the kernel chooses its splits
  int sm_count = 1;
  double total_regret = 0.0; // sum over points of (chosen time / best time - 1)
  int points = 0;
  [[nodiscard]] bool uses_v2(const DecodePoint& p) const {
    return count_tiles(tiles, p, partition) > k * sm_count;
  }
  // `partition` is null for kKernelSplits.
  [[nodiscard]] nlohmann::json to_json() const;
  // The rule a table holds (its `rule` field); throws InputError on an unknown tiles definition
  // or one that does not agree with the partition (context_len tiles go with a null partition).
  [[nodiscard]] static RuleFit from_json(const nlohmann::json& j);
};

// Minimises total regret over usable points, for every tiles definition and every measured
// partition size; `all` (optional) receives the best fit of each (definition, partition).
[[nodiscard]] RuleFit fit_rule(const std::vector<DecodePoint>& pts, int sm_count,
                               std::vector<RuleFit>* all = nullptr);

} // namespace attn
