// Host-side rules of the CUDA prefill kernel (kernels/prefill.cuh): its configuration space, why a
// configuration cannot run a problem, the NVRTC defines of a variant and its launch shape with
// the q-tile map. No CUDA calls: CPU-tested.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/backends/backend.h"
#include "src/backends/cuda/launch_common.h"
#include "src/model/problem.h"

namespace attn::cuda {

inline constexpr int kPrefillHeadDims[] = {64, 80, 96, 112, 128, 192, 256};
inline constexpr int kPrefillMinBlockSize = 8;
inline constexpr int kPrefillMaxBlockSize = 256;
inline constexpr int kPrefillQTiles[] = {64, 128};
inline constexpr int kPrefillKTiles[] = {16, 32, 64};
inline constexpr int kPrefillWarps[] = {4, 8};
inline constexpr int kPrefillStages[] = {1, 2};
inline constexpr int kPrefillMinCc = 80; // mma.sync m16n8k16 with bf16, cp.async
// Every warp owns 16 query rows, so q_tile = 16 * warps: the kernel can give a warp 32 rows, but
// ptxas spilled those variants already at head_dim 128 (twice the output accumulators).
inline constexpr int kPrefillRowsPerWarp = 16;
// Above this head_dim the output accumulators (head_dim / 2 floats per thread) leave room for
// key tiles of at most 32 (64-key tiles spilled at head_dim 192 and 256).
inline constexpr int kPrefillMaxDimWideKTile = 128;

// The defaults a prefill configuration takes for parameters it does not name.
inline constexpr int kDefaultQTile = 64;
inline constexpr int kDefaultKTile = 64; // 32 above head_dim kPrefillMaxDimWideKTile
inline constexpr int kDefaultWarps = 4;
inline constexpr int kDefaultStages = 2;

// One compiled variant of kernels/prefill.cuh.
struct PrefillVariant {
  DType dtype = DType::f16;
  int head_dim = 128;
  int block_size = 16;
  int q_tile = kDefaultQTile; // BLOCK_M
  int k_tile = kDefaultKTile; // BLOCK_N
  int warps = kDefaultWarps;  // WARPS
  int stages = kDefaultStages;
  // An fp8 cache's dtype (KV_DTYPE); nullopt: the caches have `dtype`.
  std::optional<DType> kv_dtype{};

  [[nodiscard]] std::vector<std::string> defines() const;
  // "prefill bf16 d=128 bs=16 q_tile=64 k_tile=64 warps=4 stages=2", with " kv=fp8_e4m3" after
  // the dtype for an fp8 cache
  [[nodiscard]] std::string describe() const;
  [[nodiscard]] int threads() const { return warps * 32; }
  bool operator==(const PrefillVariant&) const = default;
};

[[nodiscard]] PrefillVariant prefill_variant(const KernelConfig& cfg, const AttnParams& p);

// Dynamic shared memory of a variant, bytes: exactly SMEM_BYTES of prefill.cuh.
[[nodiscard]] int64_t prefill_smem_bytes(const PrefillVariant& v);

// What the prefill family declares (kernel_decl.h): HND caches, lse, and every value of q_tile,
// k_tile, warps and stages the tuner tries on some problem.
[[nodiscard]] const FamilyDecl& prefill_family();
// Whether a declared configuration is offered for problems with parameters `p`: warps is
// q_tile / kPrefillRowsPerWarp, k_tile 32 / 64 up to head_dim kPrefillMaxDimWideKTile, 16 / 32
// above it.
[[nodiscard]] bool prefill_offers(const KernelConfig& c, const AttnParams& p);
// The configurations the tuner explores for these attention parameters: the declared ones
// prefill_offers keeps (q_tile 64 / 128 with 4 / 8 warps, k_tile 32 / 64 or 16 / 32, stages 1 / 2).
[[nodiscard]] std::vector<KernelConfig> prefill_config_space(const AttnParams& p);

// Why `cfg` cannot run `pr` under `lim`, checked without compiling; nullopt when it can.
[[nodiscard]] std::optional<std::string>
prefill_static_can_run(const KernelConfig& cfg, const Problem& pr, const CudaLimits& lim);

struct PrefillLaunch {
  Dim3 grid;  // (q tiles, num_heads)
  Dim3 block; // warps * 32
  int64_t smem = 0;
  // [tiles, 2]: (sequence, first row) per q tile, the tiles with most visible keys first so
  // that the long causal tiles do not start last.
  std::vector<int32_t> tile_map;
  int64_t key_tiles = 0; // key tiles all CTAs of one head walk (work measure, for tests)
};

[[nodiscard]] PrefillLaunch prefill_launch(const PrefillVariant& v, const Problem& pr);

inline constexpr const char* kPrefillEntry = "prefill";

} // namespace attn::cuda
