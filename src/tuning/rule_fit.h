// Fitting the compact rule `v2 when tiles > k * sm_count` to the decode points of a sweep: the
// tiles definition, partition and k with the least total regret (the table's `rule` field).
#pragma once
#include <vector>

#include <nlohmann/json.hpp>

#include "src/tuning/decode_point.h"

namespace attn {

// How tiles are counted in `v2 when tiles > k * sm_count`, partitions = ceil(ctx / partition).
enum class TilesDef { batch_kv_heads_parts, batch_heads_parts, kv_heads_parts, heads_parts };
[[nodiscard]] const char* tiles_name(TilesDef d);
[[nodiscard]] double count_tiles(TilesDef d, const DecodePoint& p, int partition);

struct RuleFit {
  TilesDef tiles = TilesDef::batch_kv_heads_parts;
  double k = 0.0;
  int partition = 512;
  int sm_count = 1;
  double total_regret = 0.0; // sum over points of (chosen time / best time - 1)
  int points = 0;
  [[nodiscard]] bool uses_v2(const DecodePoint& p) const {
    return count_tiles(tiles, p, partition) > k * sm_count;
  }
  [[nodiscard]] nlohmann::json to_json() const;
  // The rule a table holds (its `rule` field); throws InputError on an unknown tiles definition.
  [[nodiscard]] static RuleFit from_json(const nlohmann::json& j);
};

// Minimises total regret over usable points, for every tiles definition and every measured
// partition size; `all` (optional) receives the best fit of each (definition, partition).
[[nodiscard]] RuleFit fit_rule(const std::vector<DecodePoint>& pts, int sm_count,
                               std::vector<RuleFit>* all = nullptr);

} // namespace attn
