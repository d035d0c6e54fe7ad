// KV-cache layouts (SPEC.md "KV-cache layouts"): how engines arrange paged key and value caches
// (HND, NHD, vllm), their shapes, and the element offset of (block, kv head, slot, dim) in each.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "src/model/dtype.h"

namespace attn {

// Same numbering as attn_kv_layout in include/attn_tune/plugin.h.
enum class KvLayout { HND = 0, NHD = 1, vllm = 2 };

inline constexpr KvLayout kAllKvLayouts[] = {KvLayout::HND, KvLayout::NHD, KvLayout::vllm};

[[nodiscard]] const char* kv_layout_name(KvLayout l); // "HND", "NHD", "vllm"
// Accepts the names above in any case; throws InputError naming the value and the accepted ones.
[[nodiscard]] KvLayout parse_kv_layout(const std::string& s);

// vllm packs x consecutive key elements into 16 bytes: 8 for fp16/bf16, 4 for fp32, 16 for fp8.
[[nodiscard]] inline int vllm_x(DType t) { return int(16 / dtype_size(t)); }

// Shapes of the two caches in a layout. Throws InputError for vllm when head_dim % x != 0.
//   HND   key, value [num_blocks, num_kv_heads, block_size, head_dim]
//   NHD   key, value [num_blocks, block_size, num_kv_heads, head_dim]
//   vllm  key [num_blocks, num_kv_heads, head_dim / x, block_size, x],
//         value [num_blocks, num_kv_heads, head_dim, block_size]
[[nodiscard]] std::vector<int64_t> key_cache_shape(KvLayout l, DType t, int64_t num_blocks,
                                                   int num_kv_heads, int block_size, int head_dim);
[[nodiscard]] std::vector<int64_t> value_cache_shape(KvLayout l, DType t, int64_t num_blocks,
                                                     int num_kv_heads, int block_size,
                                                     int head_dim);
// The shapes as SPEC.md writes them, for messages: "[num_blocks, block_size, num_kv_heads,
// head_dim]".
[[nodiscard]] std::string key_cache_shape_pattern(KvLayout l);
[[nodiscard]] std::string value_cache_shape_pattern(KvLayout l);

// What the element offsets depend on. Offsets count elements from the start of a cache.
struct KvCacheGeometry {
  KvLayout layout = KvLayout::HND;
  int num_kv_heads = 0;
  int block_size = 0;
  int head_dim = 0;
  int x = 1; // vllm's key packing (vllm_x of the dtype); unused by HND and NHD

  // Element d of key slot s of physical block blk, kv head kvh.
  [[nodiscard]] int64_t key_index(int64_t blk, int kvh, int s, int d) const {
    const int64_t H = num_kv_heads, B = block_size, D = head_dim;
    switch (layout) {
    case KvLayout::NHD:
      return ((blk * B + s) * H + kvh) * D + d;
    case KvLayout::vllm:
      return (((blk * H + kvh) * (D / x) + d / x) * B + s) * x + d % x;
    default:
      return ((blk * H + kvh) * B + s) * D + d;
    }
  }
  // Element d of value slot s of physical block blk, kv head kvh.
  [[nodiscard]] int64_t value_index(int64_t blk, int kvh, int s, int d) const {
    const int64_t H = num_kv_heads, B = block_size, D = head_dim;
    switch (layout) {
    case KvLayout::NHD:
      return ((blk * B + s) * H + kvh) * D + d;
    case KvLayout::vllm:
      return ((blk * H + kvh) * D + d) * B + s;
    default:
      return ((blk * H + kvh) * B + s) * D + d;
    }
  }
  // Elements of one physical block (every kv head), the same in every layout.
  [[nodiscard]] int64_t block_elems() const {
    return int64_t(num_kv_heads) * block_size * head_dim;
  }
};

[[nodiscard]] KvCacheGeometry kv_cache_geometry(KvLayout l, DType t, int num_kv_heads,
                                                int block_size, int head_dim);

// Rearranges both caches of `num_blocks` blocks from one layout into another (same logical
// values). src and dst are whole caches of elements of dtype_size(t) bytes; they must not overlap.
void convert_kv_cache(const KvCacheGeometry& from, const KvCacheGeometry& to, DType t,
                      int64_t num_blocks, bool is_key, const void* src, void* dst);

} // namespace attn
