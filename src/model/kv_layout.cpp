#include "src/model/kv_layout.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "include/attn_tune/plugin.h"
#include "src/model/errors.h"

namespace attn {

// A plugin's attn_kv_layout converts to KvLayout by value.
static_assert(int(KvLayout::HND) == ATTN_KV_HND && int(KvLayout::NHD) == ATTN_KV_NHD &&
              int(KvLayout::vllm) == ATTN_KV_VLLM);

const char* kv_layout_name(KvLayout l) {
  switch (l) {
  case KvLayout::NHD:
    return "NHD";
  case KvLayout::vllm:
    return "vllm";
  default:
    return "HND";
  }
}

KvLayout parse_kv_layout(const std::string& s) {
  std::string l;
  for (char c : s) {
    l += char(std::tolower(static_cast<unsigned char>(c)));
  }
  for (KvLayout k : kAllKvLayouts) {
    std::string name = kv_layout_name(k);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    if (l == name) {
      return k;
    }
  }
  throw InputError("kv_layout '" + s + "' is not one of HND, NHD, vllm");
}

namespace {

void check_vllm_head_dim(DType t, int head_dim) {
  const int x = vllm_x(t);
  if (head_dim % x != 0) {
    throw InputError("kv_layout vllm needs head_dim to be a multiple of x = " + std::to_string(x) +
                     " (16 bytes of " + std::string(dtype_name(t)) + "); head_dim is " +
                     std::to_string(head_dim));
  }
}

} // namespace

std::vector<int64_t> key_cache_shape(KvLayout l, DType t, int64_t num_blocks, int num_kv_heads,
                                     int block_size, int head_dim) {
  switch (l) {
  case KvLayout::NHD:
    return {num_blocks, block_size, num_kv_heads, head_dim};
  case KvLayout::vllm: {
    check_vllm_head_dim(t, head_dim);
    const int x = vllm_x(t);
    return {num_blocks, num_kv_heads, head_dim / x, block_size, x};
  }
  default:
    return {num_blocks, num_kv_heads, block_size, head_dim};
  }
}

std::vector<int64_t> value_cache_shape(KvLayout l, DType t, int64_t num_blocks, int num_kv_heads,
                                       int block_size, int head_dim) {
  switch (l) {
  case KvLayout::NHD:
    return {num_blocks, block_size, num_kv_heads, head_dim};
  case KvLayout::vllm:
    check_vllm_head_dim(t, head_dim); // the pair only exists where the key cache does
    return {num_blocks, num_kv_heads, head_dim, block_size};
  default:
    return {num_blocks, num_kv_heads, block_size, head_dim};
  }
}

std::string key_cache_shape_pattern(KvLayout l) {
  switch (l) {
  case KvLayout::NHD:
    return "[num_blocks, block_size, num_kv_heads, head_dim]";
  case KvLayout::vllm:
    return "[num_blocks, num_kv_heads, head_dim / x, block_size, x]";
  default:
    return "[num_blocks, num_kv_heads, block_size, head_dim]";
  }
}

std::string value_cache_shape_pattern(KvLayout l) {
  return l == KvLayout::vllm ? "[num_blocks, num_kv_heads, head_dim, block_size]"
                             : key_cache_shape_pattern(l);
}

KvCacheGeometry kv_cache_geometry(KvLayout l, DType t, int num_kv_heads, int block_size,
                                  int head_dim) {
  KvCacheGeometry g;
  g.layout = l;
  g.num_kv_heads = num_kv_heads;
  g.block_size = block_size;
  g.head_dim = head_dim;
  g.x = l == KvLayout::vllm ? vllm_x(t) : 1;
  if (l == KvLayout::vllm) {
    check_vllm_head_dim(t, head_dim);
  }
  return g;
}

namespace {

// The conversion goes through one (block, kv head) tile at a time, held as HND's
// [block_size, head_dim]: a few KiB that stay in L1, read and written with contiguous runs
// (whole rows for HND and NHD, x-element chunks for vllm keys); only vllm values, stored
// transposed, move element by element.
template <class T>
void load_tile(const KvCacheGeometry& g, bool is_key, const T* cache, int64_t blk, int kvh,
               T* tile) {
  const int64_t H = g.num_kv_heads, B = g.block_size, D = g.head_dim;
  switch (g.layout) {
  case KvLayout::HND:
    std::copy_n(cache + (blk * H + kvh) * B * D, B * D, tile);
    break;
  case KvLayout::NHD:
    for (int64_t s = 0; s < B; ++s) {
      std::copy_n(cache + ((blk * B + s) * H + kvh) * D, D, tile + s * D);
    }
    break;
  case KvLayout::vllm:
    if (is_key) { // [D / x, B, x]
      const int64_t x = g.x;
      const T* p = cache + (blk * H + kvh) * D * B;
      for (int64_t c = 0; c < D / x; ++c) {
        for (int64_t s = 0; s < B; ++s) {
          std::copy_n(p + (c * B + s) * x, x, tile + s * D + c * x);
        }
      }
    } else { // [D, B]
      const T* p = cache + (blk * H + kvh) * D * B;
      for (int64_t d = 0; d < D; ++d) {
        for (int64_t s = 0; s < B; ++s) {
          tile[s * D + d] = p[d * B + s];
        }
      }
    }
    break;
  }
}

template <class T>
void store_tile(const KvCacheGeometry& g, bool is_key, T* cache, int64_t blk, int kvh,
                const T* tile) {
  const int64_t H = g.num_kv_heads, B = g.block_size, D = g.head_dim;
  switch (g.layout) {
  case KvLayout::HND:
    std::copy_n(tile, B * D, cache + (blk * H + kvh) * B * D);
    break;
  case KvLayout::NHD:
    for (int64_t s = 0; s < B; ++s) {
      std::copy_n(tile + s * D, D, cache + ((blk * B + s) * H + kvh) * D);
    }
    break;
  case KvLayout::vllm:
    if (is_key) {
      const int64_t x = g.x;
      T* p = cache + (blk * H + kvh) * D * B;
      for (int64_t c = 0; c < D / x; ++c) {
        for (int64_t s = 0; s < B; ++s) {
          std::copy_n(tile + s * D + c * x, x, p + (c * B + s) * x);
        }
      }
    } else {
      T* p = cache + (blk * H + kvh) * D * B;
      for (int64_t d = 0; d < D; ++d) {
        for (int64_t s = 0; s < B; ++s) {
          p[d * B + s] = tile[s * D + d];
        }
      }
    }
    break;
  }
}

// Elements are moved as raw bits of their width: no conversion, so NaN payloads and -0 survive.
template <class T>
void convert(const KvCacheGeometry& from, const KvCacheGeometry& to, int64_t num_blocks,
             bool is_key, const T* src, T* dst) {
  std::vector<T> tile(std::size_t(from.block_size) * std::size_t(from.head_dim));
  for (int64_t blk = 0; blk < num_blocks; ++blk) {
    for (int kvh = 0; kvh < from.num_kv_heads; ++kvh) {
      load_tile(from, is_key, src, blk, kvh, tile.data());
      store_tile(to, is_key, dst, blk, kvh, tile.data());
    }
  }
}

} // namespace

void convert_kv_cache(const KvCacheGeometry& from, const KvCacheGeometry& to, DType t,
                      int64_t num_blocks, bool is_key, const void* src, void* dst) {
  if (from.num_kv_heads != to.num_kv_heads || from.block_size != to.block_size ||
      from.head_dim != to.head_dim) {
    throw InputError("cannot convert a KV cache between different head counts, block sizes or "
                     "head dims");
  }
  if (dtype_size(t) == 4) {
    convert(from, to, num_blocks, is_key, static_cast<const uint32_t*>(src),
            static_cast<uint32_t*>(dst));
  } else if (dtype_size(t) == 1) {
    convert(from, to, num_blocks, is_key, static_cast<const uint8_t*>(src),
            static_cast<uint8_t*>(dst));
  } else {
    convert(from, to, num_blocks, is_key, static_cast<const uint16_t*>(src),
            static_cast<uint16_t*>(dst));
  }
}

} // namespace attn
