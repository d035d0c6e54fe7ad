#include "src/model/problem.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "src/model/errors.h"

namespace attn {

namespace {

[[noreturn]] void bad(const std::string& msg) { throw InputError(msg); }

std::string shape_of(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    r += (i ? ", " : "") + std::to_string(s[i]);
  }
  return r + "]";
}

void expect_shape(const char* name, const HostTensor& t, const std::vector<int64_t>& want) {
  if (t.shape != want) {
    bad(std::string(name) + " has shape " + shape_of(t.shape) + ", expected " + shape_of(want));
  }
  if (t.data.size() != std::size_t(t.numel()) * dtype_size(t.dtype)) {
    bad(std::string(name) + " holds " + std::to_string(t.data.size()) + " bytes, expected " +
        std::to_string(std::size_t(t.numel()) * dtype_size(t.dtype)));
  }
}

// The caches against the shapes of the problem's layout; the message names the layout and its
// shape pattern, since a cache in another layout often has the right rank and size.
void check_cache_shapes(const Problem& pr) {
  const AttnParams& p = pr.params;
  const DType t = p.cache_dtype();
  const std::vector<int64_t> want[2] = {
      key_cache_shape(pr.kv_layout, t, pr.num_blocks, p.num_kv_heads, p.block_size, p.head_dim),
      value_cache_shape(pr.kv_layout, t, pr.num_blocks, p.num_kv_heads, p.block_size,
                        p.head_dim)};
  const HostTensor* have[2] = {&pr.key_cache, &pr.value_cache};
  for (int i = 0; i < 2; ++i) {
    const char* name = i == 0 ? "key_cache" : "value_cache";
    if (have[i]->shape != want[i]) {
      bad(std::string(name) + " has shape " + shape_of(have[i]->shape) + ", expected " +
          shape_of(want[i]) + " for kv_layout " + kv_layout_name(pr.kv_layout) + " " +
          (i == 0 ? key_cache_shape_pattern(pr.kv_layout)
                  : value_cache_shape_pattern(pr.kv_layout)));
    }
    expect_shape(name, *have[i], want[i]); // the byte count
  }
}

} // namespace

double AttnParams::effective_scale() const {
  return scale ? *scale : 1.0 / std::sqrt(double(head_dim));
}

void AttnParams::validate() const {
  if (num_heads <= 0) {
    bad("num_heads " + std::to_string(num_heads) + " must be positive");
  }
  if (num_kv_heads <= 0) {
    bad("num_kv_heads " + std::to_string(num_kv_heads) + " must be positive");
  }
  if (num_heads % num_kv_heads != 0) {
    bad("num_heads " + std::to_string(num_heads) + " is not a multiple of num_kv_heads " +
        std::to_string(num_kv_heads));
  }
  if (head_dim <= 0 || head_dim > kMaxHeadDim || head_dim % kHeadDimStep != 0) {
    bad("head_dim " + std::to_string(head_dim) + " is unsupported (a multiple of " +
        std::to_string(kHeadDimStep) + " up to " + std::to_string(kMaxHeadDim) + ")");
  }
  if (block_size <= 0 || block_size > kMaxBlockSize) {
    bad("block_size " + std::to_string(block_size) + " is out of range (1 to " +
        std::to_string(kMaxBlockSize) + ")");
  }
  if (window_left < -1) {
    bad("window_left " + std::to_string(window_left) + " must be -1 (unbounded) or >= 0");
  }
  if (window_right < -1) {
    bad("window_right " + std::to_string(window_right) + " must be -1 (unbounded) or >= 0");
  }
  if (!std::isfinite(softcap) || softcap < 0) {
    bad("softcap " + std::to_string(softcap) + " must be >= 0 (0 turns it off)");
  }
  if (scale && (!std::isfinite(*scale) || *scale <= 0)) {
    bad("scale " + std::to_string(*scale) + " must be positive and finite");
  }
  if (is_fp8(dtype)) {
    bad("dtype " + std::string(dtype_name(dtype)) +
        " is a KV-cache dtype: queries and outputs are fp32, fp16 or bf16");
  }
  if (kv_dtype && *kv_dtype != dtype && !is_fp8(*kv_dtype)) {
    bad("kv_dtype " + std::string(dtype_name(*kv_dtype)) + " must be fp8_e4m3, fp8_e5m2 or the "
        "query dtype " + std::string(dtype_name(dtype)));
  }
}

std::string AttnParams::describe() const {
  std::ostringstream s;
  s << "h=" << num_heads << " kvh=" << num_kv_heads << " d=" << head_dim << " bs=" << block_size
    << " " << dtype_name(dtype) << (cache_dtype() != dtype ? " kv=" : "")
    << (cache_dtype() != dtype ? dtype_name(cache_dtype()) : "") << (causal ? " causal" : " full")
    << " win=" << window_left << ","
    << window_right << " softcap=" << softcap;
  if (scale) {
    s << " scale=" << *scale;
  }
  return s.str();
}

const char* phase_name(Phase p) { return p == Phase::decode ? "decode" : "prefill"; }

int Problem::num_rows() const {
  return phase == Phase::decode ? batch : (cu_seqlens_q.empty() ? 0 : cu_seqlens_q.back());
}

int Problem::max_k_len() const {
  int m = 0;
  for (int b = 0; b < batch; ++b) {
    m = std::max(m, k_len(b));
  }
  return m;
}

int Problem::max_q_len() const {
  int m = 0;
  for (int b = 0; b < batch; ++b) {
    m = std::max(m, q_len(b));
  }
  return m;
}

int64_t visible_pairs(const attn_math::Mask& m, int q_len, int k_len) {
  int64_t pairs = 0;
  for (int i = 0; i < q_len; ++i) {
    int lo = 0;
    int hi = 0;
    attn_math::visible_range(m, attn_math::row_position(q_len, k_len, i), k_len, &lo, &hi);
    pairs += std::max(0, hi - lo);
  }
  return pairs;
}

int64_t Problem::kv_bytes_touched() const {
  int64_t keys = 0;
  for (int b = 0; b < batch; ++b) {
    const int ql = q_len(b);
    const int kl = k_len(b);
    if (ql == 0 || kl == 0) {
      continue;
    }
    int lo = 0;
    int hi = 0;
    attn_math::visible_range_rows(params.mask(), ql, kl, 0, ql, &lo, &hi);
    keys += std::max(0, hi - lo);
  }
  return keys * 2 * params.num_kv_heads * params.head_dim *
         int64_t(dtype_size(params.cache_dtype()));
}

int64_t Problem::visible_pairs() const {
  int64_t pairs = 0;
  for (int b = 0; b < batch; ++b) {
    pairs += attn::visible_pairs(params.mask(), q_len(b), k_len(b));
  }
  return pairs * params.num_heads;
}

void Problem::validate() const {
  params.validate();
  const AttnParams& p = params;
  if (batch <= 0) {
    bad("batch " + std::to_string(batch) + " must be positive");
  }
  if (num_blocks <= 0) {
    bad("num_blocks " + std::to_string(num_blocks) + " must be positive");
  }
  if (max_blocks_per_seq < 0) {
    bad("block_tables has " + std::to_string(max_blocks_per_seq) + " columns");
  }
  if (block_tables.size() != std::size_t(batch) * std::size_t(max_blocks_per_seq)) {
    bad("block_tables holds " + std::to_string(block_tables.size()) + " entries, expected batch " +
        std::to_string(batch) + " x " + std::to_string(max_blocks_per_seq));
  }
  if (phase == Phase::decode) {
    if (context_lens.size() != std::size_t(batch)) {
      bad("context_lens has " + std::to_string(context_lens.size()) + " entries, expected batch " +
          std::to_string(batch));
    }
    for (int b = 0; b < batch; ++b) {
      if (context_lens[std::size_t(b)] < 0) {
        bad("context_lens[" + std::to_string(b) +
            "] = " + std::to_string(context_lens[std::size_t(b)]) + " is negative");
      }
    }
  } else {
    for (const auto* cu : {&cu_seqlens_q, &cu_seqlens_k}) {
      const char* name = cu == &cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_k";
      if (cu->size() != std::size_t(batch) + 1) {
        bad(std::string(name) + " has " + std::to_string(cu->size()) +
            " entries, expected batch+1 = " + std::to_string(batch + 1));
      }
      if ((*cu)[0] != 0) {
        bad(std::string(name) + "[0] = " + std::to_string((*cu)[0]) + ", expected 0");
      }
      for (int b = 0; b < batch; ++b) {
        if ((*cu)[std::size_t(b) + 1] < (*cu)[std::size_t(b)]) {
          bad(std::string(name) + " decreases at index " + std::to_string(b + 1) + " (" +
              std::to_string((*cu)[std::size_t(b)]) + " -> " +
              std::to_string((*cu)[std::size_t(b) + 1]) + "), a negative length");
        }
      }
    }
  }
  const int64_t rows = num_rows();
  if (query.dtype != p.dtype) {
    bad("query is " + std::string(dtype_name(query.dtype)) + " but the problem is " +
        std::string(dtype_name(p.dtype)));
  }
  for (const auto* t : {&key_cache, &value_cache}) {
    if (t->dtype != p.cache_dtype()) {
      bad(std::string(t == &key_cache ? "key_cache" : "value_cache") + " is " +
          std::string(dtype_name(t->dtype)) + " but the problem's cache is " +
          std::string(dtype_name(p.cache_dtype())));
    }
  }
  for (const auto* s : {&k_scale, &v_scale}) {
    const char* name = s == &k_scale ? "k_scale" : "v_scale";
    if (!p.fp8_cache() && !s->empty()) {
      bad(std::string(name) + " is given but the cache is " +
          std::string(dtype_name(p.cache_dtype())) + ", not fp8");
    }
    if (s->size() > 1 && s->size() != std::size_t(p.num_kv_heads)) {
      bad(std::string(name) + " has " + std::to_string(s->size()) +
          " entries, expected 1 (per tensor) or num_kv_heads " + std::to_string(p.num_kv_heads));
    }
    for (std::size_t i = 0; i < s->size(); ++i) {
      if (!std::isfinite((*s)[i]) || !((*s)[i] > 0.0f)) {
        bad(std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string((*s)[i]) +
            " must be positive and finite");
      }
    }
  }
  expect_shape("query", query, {rows, p.num_heads, p.head_dim});
  check_cache_shapes(*this);
  for (int b = 0; b < batch; ++b) {
    // In 64 bits: a k_len near INT_MAX would wrap to a negative block count and pass.
    const int64_t used = (int64_t(k_len(b)) + p.block_size - 1) / p.block_size;
    if (used > max_blocks_per_seq) {
      bad("block table of sequence " + std::to_string(b) + " has " +
          std::to_string(max_blocks_per_seq) + " entries, too short for its " +
          std::to_string(k_len(b)) + " keys (needs " + std::to_string(used) + ")");
    }
    for (int i = 0; i < int(used); ++i) {
      const int32_t blk = block_tables[std::size_t(b) * max_blocks_per_seq + i];
      if (blk < 0 || blk >= num_blocks) {
        bad("block_tables[" + std::to_string(b) + "][" + std::to_string(i) +
            "] = " + std::to_string(blk) + " is outside the cache's " + std::to_string(num_blocks) +
            " blocks");
      }
    }
  }
}

std::string Problem::describe() const {
  std::ostringstream s;
  s << phase_name(phase) << " batch=" << batch << " " << params.describe();
  if (kv_layout != KvLayout::HND) {
    s << " kv_layout=" << kv_layout_name(kv_layout);
  }
  if (phase == Phase::decode) {
    s << " max_ctx=" << max_k_len();
  } else {
    s << " max_q=" << max_q_len() << " max_k=" << max_k_len();
  }
  return s.str();
}

namespace {
// "k_scale 0.5", "k_scale per KV head 0.5, 2", or "no k_scale (1, as SPEC.md reads one absent)".
std::string scale_words(const char* name, const std::vector<float>& s) {
  if (s.empty()) {
    return std::string("no ") + name + " (1, as SPEC.md reads one absent)";
  }
  std::string w = std::string(name) + (s.size() > 1 ? " per KV head" : "");
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i == 8) {
      w += ", ... (" + std::to_string(s.size()) + " in all)";
      break;
    }
    char buf[32];
    for (int digits = 6; digits <= 9; ++digits) { // the shortest that reads back as the float
      std::snprintf(buf, sizeof buf, "%.*g", digits, double(s[i]));
      if (std::strtof(buf, nullptr) == s[i]) {
        break;
      }
    }
    w += (i == 0 ? " " : ", ") + std::string(buf);
  }
  return w;
}
} // namespace

std::string fp8_scale_words(const Problem& pr) {
  if (!pr.params.fp8_cache()) {
    return "";
  }
  return scale_words("k_scale", pr.k_scale) + ", " + scale_words("v_scale", pr.v_scale);
}

Problem with_kv_layout(const Problem& pr, KvLayout to) {
  if (pr.kv_layout == to) {
    return pr;
  }
  const AttnParams& p = pr.params;
  p.validate();
  if (pr.num_blocks <= 0) {
    bad("num_blocks " + std::to_string(pr.num_blocks) + " must be positive");
  }
  const DType t = p.cache_dtype();
  if (pr.key_cache.dtype != t || pr.value_cache.dtype != t) {
    bad("the caches are not " + std::string(dtype_name(t)) + " like the problem's cache");
  }
  check_cache_shapes(pr); // every offset below is inside both caches
  Problem out;
  // Copy everything but the caches, which are rebuilt in place of a copy.
  out.phase = pr.phase;
  out.params = pr.params;
  out.batch = pr.batch;
  out.num_blocks = pr.num_blocks;
  out.max_blocks_per_seq = pr.max_blocks_per_seq;
  out.block_tables = pr.block_tables;
  out.context_lens = pr.context_lens;
  out.cu_seqlens_q = pr.cu_seqlens_q;
  out.cu_seqlens_k = pr.cu_seqlens_k;
  out.query = pr.query;
  out.k_scale = pr.k_scale;
  out.v_scale = pr.v_scale;
  out.seed = pr.seed;
  out.kv_layout = to;
  out.key_cache = HostTensor(
      t, key_cache_shape(to, t, pr.num_blocks, p.num_kv_heads, p.block_size, p.head_dim));
  out.value_cache = HostTensor(
      t, value_cache_shape(to, t, pr.num_blocks, p.num_kv_heads, p.block_size, p.head_dim));
  const KvCacheGeometry from_g = pr.kv_geometry();
  const KvCacheGeometry to_g = out.kv_geometry();
  convert_kv_cache(from_g, to_g, t, pr.num_blocks, /*is_key=*/true, pr.key_cache.raw(),
                   out.key_cache.raw());
  convert_kv_cache(from_g, to_g, t, pr.num_blocks, /*is_key=*/false, pr.value_cache.raw(),
                   out.value_cache.raw());
  return out;
}

void negate_elements(std::byte* data, std::size_t bytes, std::size_t element_bytes) {
  // Little-endian: the top byte of each element holds the sign. Eight bytes at a time hold whole
  // elements (1, 2 or 4 bytes each), so one mask flips every sign in them: a byte at a time, this
  // loop was a tenth of verify's CPU time (it negates whole caches, spare blocks included).
  std::size_t i = 0;
  if (element_bytes > 0 && element_bytes <= 8 && 8 % element_bytes == 0) {
    uint64_t mask = 0;
    for (std::size_t b = element_bytes - 1; b < 8; b += element_bytes) {
      mask |= uint64_t{0x80} << (8 * b);
    }
    for (; i + 8 <= bytes; i += 8) {
      uint64_t w;
      std::memcpy(&w, data + i, 8);
      w ^= mask;
      std::memcpy(data + i, &w, 8);
    }
  }
  for (i += element_bytes - 1; i < bytes; i += element_bytes) {
    data[i] ^= std::byte{0x80};
  }
}

bool rescale_inputs(Problem& p, bool back) {
  if (!p.params.fp8_cache() || p.k_scale.empty() || p.v_scale.empty()) {
    return false;
  }
  const float to_query = back ? 2.0f : 0.5f;
  for (std::size_t i = 0; i < std::size_t(p.query.numel()); ++i) {
    p.query.set(i, p.query.get(i) * to_query);
  }
  for (auto* s : {&p.k_scale, &p.v_scale}) {
    for (float& x : *s) {
      x /= to_query;
    }
  }
  return true;
}

void negate_inputs(Problem& p) {
  for (HostTensor* t : {&p.query, &p.key_cache, &p.value_cache}) {
    negate_elements(t->data.data(), t->data.size(), dtype_size(t->dtype));
  }
}

} // namespace attn
