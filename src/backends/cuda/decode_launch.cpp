// Configuration space, can_run reasons, defines and launch shapes of kernels/decode.cuh; the
// numbers here must agree with the constants at the top of that file.
#include "src/backends/cuda/decode_launch.h"

#include <algorithm>

#include "kernels/attn_math.h"

namespace attn::cuda {

namespace {

bool is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

} // namespace

int max_vec(DType t) { return std::min(8, int(16 / dtype_size(t))); }

const char* decode_entry(Family f) { return f == Family::decode_v2 ? "decode_v2" : "decode_v1"; }

std::vector<std::string> DecodeVariant::defines() const {
  std::vector<std::string> d = common_defines(dtype, kv_dtype, head_dim, block_size);
  d.insert(d.end(), {"-DTHREADS=" + std::to_string(threads), "-DVEC=" + std::to_string(vec),
                     "-DGROUP=" + std::to_string(group), "-DGQA=" + std::to_string(group ? gqa : 1),
                     "-DPARTITION=" + std::to_string(family == Family::decode_v2 ? partition : 0),
                     "-DREDUCE_THREADS=" + std::to_string(kReduceThreads)});
  return d;
}

std::string DecodeVariant::describe() const {
  std::string s = std::string(family_name(family)) + " " + std::string(dtype_name(dtype)) +
                  (kv_dtype ? " kv=" + std::string(dtype_name(*kv_dtype)) : std::string()) +
                  " d=" + std::to_string(head_dim) + " bs=" + std::to_string(block_size) +
                  " threads=" + std::to_string(threads) + " vec=" + std::to_string(vec) +
                  " group=" + std::to_string(group);
  if (group) {
    s += " gqa=" + std::to_string(gqa);
  }
  if (family == Family::decode_v2) {
    s += " partition=" + std::to_string(partition);
  }
  return s;
}

DecodeVariant decode_variant(const KernelConfig& cfg, const AttnParams& p) {
  DecodeVariant v;
  v.family = cfg.family;
  v.dtype = p.dtype;
  v.head_dim = p.head_dim;
  v.block_size = p.block_size;
  v.threads = cfg.get("threads", kDefaultThreads);
  v.kv_dtype = p.fp8_cache() ? p.kv_dtype : std::nullopt;
  v.vec = cfg.get("vec", max_vec(p.cache_dtype()));
  v.group = cfg.get("split", 0);
  v.gqa = v.group ? p.group_size() : 1;
  v.partition = cfg.family == Family::decode_v2 ? cfg.get("partition", kDefaultPartition) : 0;
  return v;
}

const FamilyDecl& decode_family(Family f) {
  // partition outermost, then split, threads and vec: the order the tuner has always walked.
  // Both fp8 formats are read, converted in registers.
  static const std::vector<DType> kDecodeFp8 = {DType::fp8_e4m3, DType::fp8_e5m2};
  static const FamilyDecl v1{Family::decode_v1,
                             KvLayout::HND,
                             true,
                             {{"split", {0, 1}}, {"threads", {64, 128, 256}}, {"vec", {8, 4, 2}}},
                             kDecodeFp8};
  static const FamilyDecl v2{Family::decode_v2,
                             KvLayout::HND,
                             true,
                             {{"partition", {256, 512, 1024}},
                              {"split", {0, 1}},
                              {"threads", {64, 128, 256}},
                              {"vec", {8, 4, 2}}},
                             kDecodeFp8};
  return f == Family::decode_v2 ? v2 : v1;
}

bool decode_offers(const KernelConfig& c, const AttnParams& p) {
  if (!family_is_decode(c.family)) {
    return false;
  }
  // split=1 only where it groups something and the group fits in registers.
  if (c.get("split", 0) == 1 &&
      !(p.num_kv_heads > 0 && p.group_size() > 1 && p.group_size() <= kDecodeMaxGroup)) {
    return false;
  }
  // The widest load of the cache's dtype and half of it.
  const int widest = max_vec(p.cache_dtype());
  const int vec = c.get("vec", widest);
  if (vec != widest && vec != widest / 2) {
    return false;
  }
  if (c.family == Family::decode_v2) {
    const int part = c.get("partition", kDefaultPartition);
    return p.block_size > 0 && part % p.block_size == 0;
  }
  return true;
}

std::vector<KernelConfig> decode_config_space(Family f, const AttnParams& p) {
  std::vector<KernelConfig> out;
  if (!family_is_decode(f)) {
    return out;
  }
  for (KernelConfig& c : declared_configs(decode_family(f))) {
    if (decode_offers(c, p)) {
      out.push_back(std::move(c));
    }
  }
  return out;
}

std::optional<std::string> decode_static_can_run(const KernelConfig& cfg, const Problem& pr,
                                                 const CudaLimits& lim) {
  const AttnParams& p = pr.params;
  if (!family_is_decode(cfg.family)) {
    return std::string("the CUDA backend has no ") + family_name(cfg.family) + " kernel";
  }
  if (pr.phase != Phase::decode) {
    return std::string("decode kernels cannot run a ") + phase_name(pr.phase) + " problem";
  }
  // partition is a decode_v2 parameter only
  if (auto why = cfg.family == Family::decode_v2
                     ? unknown_parameter(cfg, {"threads", "vec", "split", "partition"})
                     : unknown_parameter(cfg, {"threads", "vec", "split"})) {
    return why;
  }
  if (auto why = head_dim_not_compiled(p.head_dim, kDecodeHeadDims)) {
    return why;
  }
  if (!in_list(kDecodeBlockSizes, p.block_size)) {
    return "block_size " + std::to_string(p.block_size) +
           " is not supported (supported: " + list_string(kDecodeBlockSizes) + ")";
  }
  const DecodeVariant v = decode_variant(cfg, p);
  if (auto why = not_one_of("threads", v.threads, kDecodeThreads)) {
    return why;
  }
  if (v.threads > lim.max_threads_per_block) {
    return "threads=" + std::to_string(v.threads) + " exceeds the device's " +
           std::to_string(lim.max_threads_per_block) + " threads per block";
  }
  if (!is_pow2(v.vec) || v.vec > max_vec(p.cache_dtype()) || (p.fp8_cache() && v.vec < 2)) {
    return "vec=" + std::to_string(v.vec) + " must be a power of two up to " +
           std::to_string(max_vec(p.cache_dtype())) + (p.fp8_cache() ? " and at least 2" : "") +
           " for " + std::string(dtype_name(p.cache_dtype())) + (p.fp8_cache() ? " caches" : "");
  }
  if (p.head_dim % v.vec != 0) {
    return "vec=" + std::to_string(v.vec) + " does not divide head_dim " +
           std::to_string(p.head_dim);
  }
  if (v.group != 0 && v.group != 1) {
    return "split=" + std::to_string(v.group) + " must be 0 (per query head) or 1 (per KV head)";
  }
  if (v.group == 1 && p.group_size() > kDecodeMaxGroup) {
    return "split=1 holds at most " + std::to_string(kDecodeMaxGroup) +
           " query heads per KV head in registers; this problem has " +
           std::to_string(p.group_size());
  }
  if (cfg.family == Family::decode_v2) {
    if (v.partition < p.block_size || v.partition % p.block_size != 0 || v.partition > 16384) {
      return "partition=" + std::to_string(v.partition) + " must be a multiple of block_size " +
             std::to_string(p.block_size) + " and at most 16384";
    }
  }
  const DecodeLaunch l = decode_launch(v, pr);
  if (l.static_smem > lim.smem_per_block) {
    return "needs " + std::to_string(l.static_smem) + " bytes of shared memory, the device has " +
           std::to_string(lim.smem_per_block);
  }
  if (int64_t(l.grid.y) > lim.max_grid_y) {
    return "batch " + std::to_string(pr.batch) + " exceeds the grid's y limit " +
           std::to_string(lim.max_grid_y);
  }
  if (l.reduce) {
    if (int64_t(l.grid.z) > lim.max_grid_z) {
      return std::to_string(l.max_parts) + " partitions exceed the grid's z limit " +
             std::to_string(lim.max_grid_z);
    }
    if (l.reduce_smem + 4 * (kReduceThreads / 32) > lim.smem_per_block) {
      return "the reduce needs " + std::to_string(l.reduce_smem) + " bytes of shared memory for " +
             std::to_string(l.max_parts) + " partitions; use a larger partition";
    }
  }
  return std::nullopt;
}

DecodeLaunch decode_launch(const DecodeVariant& v, const Problem& pr) {
  const AttnParams& p = pr.params;
  DecodeLaunch l;
  l.grid.x = unsigned(v.group ? p.num_kv_heads : p.num_heads);
  l.grid.y = unsigned(pr.batch);
  l.block.x = unsigned(v.threads);
  l.static_smem = int64_t(v.threads / 32) * (v.head_dim + 2) * 4;
  if (v.family == Family::decode_v2) {
    l.max_parts = std::max(1, attn_math::num_partitions(pr.max_k_len(), v.partition));
    l.grid.z = unsigned(l.max_parts);
    l.reduce = true;
    l.reduce_grid = {unsigned(p.num_heads), unsigned(pr.batch), 1};
    l.reduce_block = {unsigned(kReduceThreads), 1, 1};
    // One float per partition, rounded up to whole 16-byte groups: ptxas reads the weights
    // four at a time with LDS.128, the loop's remainder included (seen in the sm_90 SASS of
    // decode_v2_reduce, and by compute-sanitizer's memcheck on an H200 as a read past the end
    // when the partitions were not a multiple of four).
    l.reduce_smem = int64_t(l.max_parts + 3) / 4 * 16;
    l.workspace_floats = int64_t(pr.batch) * p.num_heads * l.max_parts * (v.head_dim + 2);
  }
  return l;
}

} // namespace attn::cuda
