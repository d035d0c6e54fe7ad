// Host-side rules of the CUDA decode kernels: the configuration space, why a configuration cannot
// run a problem, the NVRTC defines of a variant and its launch shapes. No CUDA calls: CPU-tested.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/backends/backend.h"
#include "src/backends/cuda/launch_common.h"
#include "src/model/problem.h"

namespace attn::cuda {

inline constexpr int kDecodeHeadDims[] = {64, 80, 96, 112, 128, 192, 256};
inline constexpr int kDecodeBlockSizes[] = {8, 16, 32, 64, 128};
inline constexpr int kDecodeThreads[] = {64, 128, 256};
inline constexpr int kDecodePartitions[] = {256, 512, 1024};
inline constexpr int kDecodeMaxGroup = 8;  // split=1 keeps GQA q rows in registers
inline constexpr int kReduceThreads = 128; // REDUCE_THREADS of decode_v2_reduce

// The defaults a configuration takes for parameters it does not name.
inline constexpr int kDefaultThreads = 128;
inline constexpr int kDefaultPartition = 512;

// One compiled variant of kernels/decode.cuh: the configuration plus the problem's shape.
struct DecodeVariant {
  Family family = Family::decode_v1;
  DType dtype = DType::f16;
  int head_dim = 128;
  int block_size = 16;
  int threads = kDefaultThreads;
  int vec = 8;
  int group = 0;     // 1: a CTA per KV head
  int gqa = 1;       // heads per KV head, compiled in when group = 1
  int partition = 0; // 0 for decode_v1
  // An fp8 cache's dtype (KV_DTYPE); nullopt: the caches have `dtype`.
  std::optional<DType> kv_dtype{};

  // "-DDTYPE=1 -DHEAD_DIM=128 ...", with -std=c++17: the NVRTC options of this variant.
  [[nodiscard]] std::vector<std::string> defines() const;
  // "decode_v2 fp16 d=128 bs=16 threads=128 vec=8 group=1 gqa=4 partition=512", with
  // " kv=fp8_e4m3" after the dtype for an fp8 cache
  [[nodiscard]] std::string describe() const;
  bool operator==(const DecodeVariant&) const = default;
};

// Widest vector load of a cache dtype, in elements: 16 bytes, at most 8 elements (an fp8 cache
// loads 8 bytes: 16 would double the row elements each lane holds, and its registers).
[[nodiscard]] int max_vec(DType t);

// The variant that `cfg` compiles to for problems with parameters `p` (defaults filled in).
[[nodiscard]] DecodeVariant decode_variant(const KernelConfig& cfg, const AttnParams& p);

// What a decode family declares (kernel_decl.h): HND caches, lse, and every value of partition,
// split, threads and vec the tuner tries on some problem.
[[nodiscard]] const FamilyDecl& decode_family(Family f);
// Whether a declared configuration is offered for problems with parameters `p`: split=1 only
// for GQA groups of 2 to kDecodeMaxGroup heads, vec the dtype's widest load or half of it,
// partitions that are multiples of block_size.
[[nodiscard]] bool decode_offers(const KernelConfig& c, const AttnParams& p);
// The configurations the tuner explores for a decode family and these attention parameters:
// the declared ones decode_offers keeps.
[[nodiscard]] std::vector<KernelConfig> decode_config_space(Family f, const AttnParams& p);

// Why `cfg` cannot run `pr` under `lim`, checked without compiling; nullopt when it can.
[[nodiscard]] std::optional<std::string>
decode_static_can_run(const KernelConfig& cfg, const Problem& pr, const CudaLimits& lim);

struct DecodeLaunch {
  Dim3 grid;
  Dim3 block;
  int64_t static_smem = 0; // bytes of the main kernel's static shared memory
  bool reduce = false;     // decode_v2: the reduce kernel follows
  Dim3 reduce_grid;
  Dim3 reduce_block;
  int64_t reduce_smem = 0; // dynamic shared memory of the reduce (a float per partition, in 16 B)
  int max_parts = 0;            // partitions of the longest sequence
  int64_t workspace_floats = 0; // m, l and partial o of every (sequence, head, partition)
};

[[nodiscard]] DecodeLaunch decode_launch(const DecodeVariant& v, const Problem& pr);

// Kernel entry points in decode.cuh.
[[nodiscard]] const char* decode_entry(Family f); // "decode_v1" or "decode_v2"
inline constexpr const char* kDecodeReduceEntry = "decode_v2_reduce";

} // namespace attn::cuda
