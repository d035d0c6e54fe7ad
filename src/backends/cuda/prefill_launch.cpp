// Configuration space, can_run reasons, defines and launch shape of kernels/prefill.cuh; the
// numbers here must agree with the constants at the top of that file.
#include "src/backends/cuda/prefill_launch.h"

#include <algorithm>
#include <iterator>

#include "kernels/attn_math.h"

namespace attn::cuda {

namespace {

// Key tiles a CTA over rows [row0, row0 + rows) of sequence b walks.
int64_t tile_key_tiles(const Problem& pr, int b, int row0, int rows, int k_tile) {
  const AttnParams& p = pr.params;
  const attn_math::Mask m{p.causal ? 1 : 0, p.window_left, p.window_right};
  int lo = 0;
  int hi = 0;
  attn_math::visible_range_rows(m, pr.q_len(b), pr.k_len(b), row0, row0 + rows, &lo, &hi);
  return hi > lo ? (hi - lo + k_tile - 1) / k_tile : 0;
}

} // namespace

std::vector<std::string> PrefillVariant::defines() const {
  std::vector<std::string> d = common_defines(dtype, kv_dtype, head_dim, block_size);
  d.insert(d.end(), {"-DBLOCK_M=" + std::to_string(q_tile), "-DBLOCK_N=" + std::to_string(k_tile),
                     "-DWARPS=" + std::to_string(warps), "-DSTAGES=" + std::to_string(stages)});
  return d;
}

std::string PrefillVariant::describe() const {
  return std::string("prefill ") + std::string(dtype_name(dtype)) +
         (kv_dtype ? " kv=" + std::string(dtype_name(*kv_dtype)) : std::string()) +
         " d=" + std::to_string(head_dim) + " bs=" + std::to_string(block_size) +
         " q_tile=" + std::to_string(q_tile) + " k_tile=" + std::to_string(k_tile) +
         " warps=" + std::to_string(warps) + " stages=" + std::to_string(stages);
}

PrefillVariant prefill_variant(const KernelConfig& cfg, const AttnParams& p) {
  PrefillVariant v;
  v.dtype = p.dtype;
  v.kv_dtype = p.fp8_cache() ? p.kv_dtype : std::nullopt;
  v.head_dim = p.head_dim;
  v.block_size = p.block_size;
  v.q_tile = cfg.get("q_tile", kDefaultQTile);
  // The default must run every supported head_dim (replay uses it): narrower above 128.
  v.k_tile = cfg.get("k_tile", p.head_dim <= kPrefillMaxDimWideKTile ? kDefaultKTile : 32);
  v.warps = cfg.get("warps", kDefaultWarps);
  v.stages = cfg.get("stages", kDefaultStages);
  return v;
}

int64_t prefill_smem_bytes(const PrefillVariant& v) {
  const int es = int(dtype_size(v.dtype));
  const int ld = v.head_dim + 16 / es;
  int64_t bytes = int64_t(v.q_tile + 2 * v.stages * v.k_tile) * ld * es;
  if (v.dtype == DType::f32) {
    bytes += int64_t(v.q_tile) * v.k_tile * 4; // P scratch: WARPS x RPW x BLOCK_N floats
  }
  return bytes;
}

const FamilyDecl& prefill_family() {
  static const FamilyDecl decl{
      Family::prefill,
      KvLayout::HND,
      true,
      {{"q_tile", std::vector<int>(std::begin(kPrefillQTiles), std::end(kPrefillQTiles))},
       {"k_tile", std::vector<int>(std::begin(kPrefillKTiles), std::end(kPrefillKTiles))},
       {"warps", std::vector<int>(std::begin(kPrefillWarps), std::end(kPrefillWarps))},
       {"stages", std::vector<int>(std::begin(kPrefillStages), std::end(kPrefillStages))}},
      // Both fp8 formats: the tiles are converted to the dtype as they are gathered.
      {DType::fp8_e4m3, DType::fp8_e5m2}};
  return decl;
}

bool prefill_offers(const KernelConfig& c, const AttnParams& p) {
  if (c.family != Family::prefill) {
    return false;
  }
  const int q_tile = c.get("q_tile", kDefaultQTile);
  if (c.get("warps", kDefaultWarps) != q_tile / kPrefillRowsPerWarp) {
    return false;
  }
  const int k_tile = c.get("k_tile", kDefaultKTile);
  const bool wide = p.head_dim <= kPrefillMaxDimWideKTile;
  return wide ? k_tile >= 32 : k_tile <= 32;
}

std::vector<KernelConfig> prefill_config_space(const AttnParams& p) {
  std::vector<KernelConfig> out;
  for (KernelConfig& c : declared_configs(prefill_family())) {
    if (prefill_offers(c, p)) {
      out.push_back(std::move(c));
    }
  }
  return out;
}

std::optional<std::string> prefill_static_can_run(const KernelConfig& cfg, const Problem& pr,
                                                  const CudaLimits& lim) {
  const AttnParams& p = pr.params;
  if (cfg.family != Family::prefill) {
    return std::string("the prefill rules cannot judge a ") + family_name(cfg.family) + " kernel";
  }
  if (pr.phase != Phase::prefill) {
    return std::string("the prefill kernel cannot run a ") + phase_name(pr.phase) + " problem";
  }
  if (auto why = unknown_parameter(cfg, {"q_tile", "k_tile", "warps", "stages"})) {
    return why;
  }
  if (lim.cc < kPrefillMinCc) {
    return "the prefill kernel needs sm_80 or newer (mma.sync m16n8k16, cp.async); this device is "
           "sm_" +
           std::to_string(lim.cc);
  }
  if (auto why = head_dim_not_compiled(p.head_dim, kPrefillHeadDims)) {
    return why;
  }
  if (p.block_size < kPrefillMinBlockSize || p.block_size > kPrefillMaxBlockSize) {
    return "block_size " + std::to_string(p.block_size) + " is outside [" +
           std::to_string(kPrefillMinBlockSize) + ", " + std::to_string(kPrefillMaxBlockSize) + "]";
  }
  const PrefillVariant v = prefill_variant(cfg, p);
  if (auto why = not_one_of("q_tile", v.q_tile, kPrefillQTiles)) {
    return why;
  }
  if (auto why = not_one_of("k_tile", v.k_tile, kPrefillKTiles)) {
    return why;
  }
  if (auto why = not_one_of("warps", v.warps, kPrefillWarps)) {
    return why;
  }
  if (auto why = not_one_of("stages", v.stages, kPrefillStages)) {
    return why;
  }
  if (v.q_tile != kPrefillRowsPerWarp * v.warps) {
    return "q_tile=" + std::to_string(v.q_tile) + " with warps=" + std::to_string(v.warps) +
           ": every warp owns " + std::to_string(kPrefillRowsPerWarp) +
           " query rows, so q_tile must be " + std::to_string(kPrefillRowsPerWarp * v.warps);
  }
  if (p.head_dim > kPrefillMaxDimWideKTile && v.k_tile > 32) {
    return "k_tile=" + std::to_string(v.k_tile) + " at head_dim " + std::to_string(p.head_dim) +
           " needs more registers than a thread has (k_tile at most 32 above head_dim " +
           std::to_string(kPrefillMaxDimWideKTile) + ")";
  }
  if (v.threads() > lim.max_threads_per_block) {
    return std::to_string(v.threads()) + " threads exceed the device's " +
           std::to_string(lim.max_threads_per_block) + " per block";
  }
  const int64_t smem = prefill_smem_bytes(v);
  if (smem > lim.smem_optin) {
    return "needs " + std::to_string(smem) + " bytes of shared memory, the device allows " +
           std::to_string(lim.smem_optin) + " per block";
  }
  if (p.num_heads > lim.max_grid_y) {
    return std::to_string(p.num_heads) + " heads exceed the grid's y limit " +
           std::to_string(lim.max_grid_y);
  }
  int64_t tiles = 0;
  for (int b = 0; b < pr.batch; ++b) {
    tiles += (pr.q_len(b) + v.q_tile - 1) / v.q_tile;
  }
  if (tiles > lim.max_grid_x) {
    return std::to_string(tiles) + " q tiles exceed the grid's x limit";
  }
  return std::nullopt;
}

PrefillLaunch prefill_launch(const PrefillVariant& v, const Problem& pr) {
  PrefillLaunch l;
  struct Tile {
    int b, row0;
    int64_t work;
  };
  std::vector<Tile> tiles;
  for (int b = 0; b < pr.batch; ++b) {
    const int q_len = pr.q_len(b);
    for (int row0 = 0; row0 < q_len; row0 += v.q_tile) {
      const int rows = std::min(v.q_tile, q_len - row0);
      tiles.push_back({b, row0, tile_key_tiles(pr, b, row0, rows, v.k_tile)});
      l.key_tiles += tiles.back().work;
    }
  }
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const Tile& x, const Tile& y) { return x.work > y.work; });
  l.tile_map.reserve(tiles.size() * 2);
  for (const Tile& t : tiles) {
    l.tile_map.push_back(t.b);
    l.tile_map.push_back(t.row0);
  }
  l.grid = {unsigned(tiles.size()), unsigned(pr.params.num_heads), 1};
  l.block = {unsigned(v.threads()), 1, 1};
  l.smem = prefill_smem_bytes(v);
  return l;
}

} // namespace attn::cuda
