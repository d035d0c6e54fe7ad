#include "src/model/problem_gen.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "src/model/errors.h"
#include "src/model/rng.h"

namespace attn {

namespace {

[[noreturn]] void bad_options(const std::string& msg) { throw InputError(msg); }

// Stores n values, each rounded to the tensor's dtype, from element `at` on: the dtype chosen
// once, not per element.
void store_values(HostTensor& t, std::size_t at, const double* v, std::size_t n) {
  switch (t.dtype) {
  case DType::f32: {
    auto* d = reinterpret_cast<float*>(t.data.data()) + at;
    for (std::size_t i = 0; i < n; ++i) {
      d[i] = float(v[i]);
    }
    break;
  }
  case DType::f16: {
    doubles_to_halves(v, reinterpret_cast<uint16_t*>(t.data.data()) + at, n);
    break;
  }
  case DType::bf16: {
    auto* d = reinterpret_cast<uint16_t*>(t.data.data()) + at;
    for (std::size_t i = 0; i < n; ++i) {
      d[i] = float_to_bf16(float(v[i]));
    }
    break;
  }
  case DType::fp8_e4m3:
  case DType::fp8_e5m2: {
    auto* d = reinterpret_cast<uint8_t*>(t.data.data()) + at;
    const Fp8Format f = fp8_format(t.dtype);
    for (std::size_t i = 0; i < n; ++i) {
      d[i] = float_to_fp8(f, float(v[i]));
    }
    break;
  }
  }
}

// Fill a tensor with standard normal values rounded to its dtype.
void fill_normal(HostTensor& t, uint64_t seed) {
  Rng rng(seed);
  const auto n = std::size_t(t.numel());
  std::vector<double> v(std::min<std::size_t>(n, 4096));
  for (std::size_t at = 0; at < n; at += v.size()) {
    const std::size_t k = std::min(v.size(), n - at);
    rng.normals(v.data(), k);
    store_values(t, at, v.data(), k);
  }
}

// Random finite values straight into a block of the tensor's storage, without arithmetic: a
// random sign, a random mantissa and an exponent of -2, -1, 0 or 0, so magnitudes in [1/4, 2)
// with a root mean square near 1.16 (fp8: the stored value, before the scale).
void store_spare_values(HostTensor& t, std::size_t at, std::size_t n, Rng& rng) {
  uint64_t r = 0;
  int left = 0;
  auto bits = [&](int k) { // the next k random bits
    if (left < k) {
      r = rng.next_u64();
      left = 64;
    }
    const auto out = uint32_t(r & ((uint64_t(1) << k) - 1));
    r >>= k;
    left -= k;
    return out;
  };
  // Each value: a sign bit, two bits that pick the exponent, `man` mantissa bits, drawn in that
  // order. Where the word in hand holds all three, they are taken in one step (the same bits as
  // three draws, with one branch instead of three that mispredict as the word runs out).
  const auto draw = [&](int man, auto&& make) __attribute__((always_inline)) {
    for (std::size_t i = 0; i < n; ++i) {
      uint32_t sign, exp, mant;
      if (left >= 3 + man) {
        sign = uint32_t(r & 1u);
        exp = uint32_t((r >> 1) & 3u);
        mant = uint32_t((r >> 3) & ((uint64_t(1) << man) - 1));
        r >>= 3 + man;
        left -= 3 + man;
      } else {
        sign = bits(1);
        exp = bits(2);
        mant = bits(man);
      }
      make(i, sign, std::min(exp, 2u), mant);
    }
  };
  switch (t.dtype) {
  case DType::f32: {
    auto* d = reinterpret_cast<uint32_t*>(t.data.data()) + at;
    draw(23, [&](std::size_t i, uint32_t sign, uint32_t e, uint32_t m) {
      d[i] = (sign << 31) | ((125u + e) << 23) | m;
    });
    break;
  }
  case DType::f16: {
    auto* d = reinterpret_cast<uint16_t*>(t.data.data()) + at;
    draw(10, [&](std::size_t i, uint32_t sign, uint32_t e, uint32_t m) {
      d[i] = uint16_t((sign << 15) | ((13u + e) << 10) | m);
    });
    break;
  }
  case DType::bf16: {
    auto* d = reinterpret_cast<uint16_t*>(t.data.data()) + at;
    draw(7, [&](std::size_t i, uint32_t sign, uint32_t e, uint32_t m) {
      d[i] = uint16_t((sign << 15) | ((125u + e) << 7) | m);
    });
    break;
  }
  case DType::fp8_e4m3:
  case DType::fp8_e5m2: {
    auto* d = reinterpret_cast<uint8_t*>(t.data.data()) + at;
    const Fp8Spec sp = fp8_spec(fp8_format(t.dtype));
    draw(sp.man_bits, [&](std::size_t i, uint32_t sign, uint32_t e, uint32_t m) {
      d[i] = uint8_t((sign << 7) | ((uint32_t(sp.bias) - 2u + e) << sp.man_bits) | m);
    });
    break;
  }
  }
}

// A cache in HND ([blocks, heads, slots, dims]: `head_elems` elements per block and head). The
// blocks some sequence's block table holds (`used`) get normal values, in block order, each
// divided by its KV head's scale before it is stored (fp8 quantisation; no scales: stored as
// drawn). The others, which a correct kernel never reads, get random finite values of the same
// order (store_spare_values) from another stream, at a small fraction of the cost: verify's
// pools are three times the blocks needed, and drawing normals for all of them took most of a
// verify run. A kernel that reads a block it should not still reads values unlike the right ones.
void fill_cache(HostTensor& t, uint64_t seed, const std::vector<char>& used,
                const std::vector<float>& scale, int head_elems, int num_kv_heads) {
  Rng rng(seed);
  Rng spare(rng.fork_seed());
  const auto head = std::size_t(head_elems);
  const auto block_elems = head * std::size_t(num_kv_heads);
  std::vector<double> v(block_elems);
  for (std::size_t blk = 0; blk < used.size(); ++blk) {
    if (used[blk] == 0) {
      store_spare_values(t, blk * block_elems, block_elems, spare);
      continue;
    }
    rng.normals(v.data(), v.size());
    if (!scale.empty()) {
      for (int h = 0; h < num_kv_heads; ++h) {
        const double sc = Problem::scale_of(scale, h);
        for (std::size_t i = std::size_t(h) * head; i < std::size_t(h + 1) * head; ++i) {
          v[i] /= sc;
        }
      }
    }
    store_values(t, blk * block_elems, v.data(), v.size());
  }
}

// Allocates the cache, draws block tables from a shuffled pool and fills q, k, v.
void build_cache_and_tables(Problem& pr, const std::vector<int>& k_lens, const GenOptions& opt) {
  const AttnParams& p = pr.params;
  const int bs = p.block_size;
  if (!(opt.pool_factor >= 1.0)) {
    bad_options("pool_factor " + std::to_string(opt.pool_factor) + " must be >= 1");
  }
  Rng rng(opt.seed);
  std::vector<int> nblocks(k_lens.size());
  int max_blocks = 0;
  for (std::size_t b = 0; b < k_lens.size(); ++b) {
    nblocks[b] = int((int64_t(k_lens[b]) + bs - 1) / bs);
    max_blocks = std::max(max_blocks, nblocks[b]);
  }
  // Prefix sharing: every sequence starts with the same physical blocks as sequence 0, over the
  // full blocks they all have (at most half of the shortest sequence, so tails stay private).
  int shared = 0;
  if (opt.shared_prefix && k_lens.size() >= 2) {
    int min_full = *std::min_element(k_lens.begin(), k_lens.end()) / bs;
    shared = min_full / 2 > 0 ? min_full / 2 : std::min(min_full, 1);
  }
  int64_t needed = shared;
  for (int n : nblocks) {
    needed += n - shared;
  }
  // In double first: a huge pool_factor must not overflow the conversion to a pool of one block.
  const double wanted = std::ceil(double(needed) * opt.pool_factor);
  if (!(wanted <= double(int64_t(1) << 30))) {
    bad_options("the problem needs " + std::to_string(needed) + " cache blocks times pool_factor " +
                std::to_string(opt.pool_factor) + ", more than 2^30");
  }
  const int64_t pool = std::max<int64_t>(1, int64_t(wanted));
  std::vector<int32_t> perm(static_cast<std::size_t>(pool));
  for (int64_t i = 0; i < pool; ++i) {
    perm[std::size_t(i)] = int32_t(i);
  }
  for (int64_t i = pool - 1; i > 0; --i) { // Fisher-Yates with our portable generator
    std::swap(perm[std::size_t(i)], perm[std::size_t(rng.range(0, i))]);
  }
  // One spare column of garbage past the longest sequence: it must never be read.
  pr.max_blocks_per_seq = max_blocks + 1;
  pr.num_blocks = int(pool);
  pr.block_tables.assign(std::size_t(pr.batch) * pr.max_blocks_per_seq, 0);
  std::size_t next = 0;
  std::vector<int32_t> prefix(static_cast<std::size_t>(shared));
  for (int i = 0; i < shared; ++i) {
    prefix[std::size_t(i)] = perm[next++];
  }
  for (int b = 0; b < pr.batch; ++b) {
    int32_t* row = &pr.block_tables[std::size_t(b) * pr.max_blocks_per_seq];
    for (int i = 0; i < pr.max_blocks_per_seq; ++i) {
      if (i < shared && i < nblocks[std::size_t(b)]) {
        row[i] = prefix[std::size_t(i)];
      } else if (i < nblocks[std::size_t(b)]) {
        row[i] = perm[next++];
      } else {
        // Unused entries: valid-looking block ids, so a kernel that reads them gives wrong
        // numbers (caught by the checker) instead of crashing.
        row[i] = int32_t(rng.range(0, pool - 1));
      }
    }
  }
  pr.key_cache = HostTensor(p.cache_dtype(), {pool, p.num_kv_heads, bs, p.head_dim});
  pr.value_cache = HostTensor(p.cache_dtype(), {pool, p.num_kv_heads, bs, p.head_dim});
  if (p.fp8_cache()) {
    for (const auto* sc : {&opt.k_scale, &opt.v_scale}) {
      const char* name = sc == &opt.k_scale ? "k_scale" : "v_scale";
      if (sc->size() > 1 && sc->size() != std::size_t(p.num_kv_heads)) {
        bad_options(std::string(name) + " has " + std::to_string(sc->size()) +
                    " entries, expected 1 or num_kv_heads " + std::to_string(p.num_kv_heads));
      }
      for (float v : *sc) {
        if (!std::isfinite(v) || !(v > 0.0f)) {
          bad_options(std::string(name) + " " + std::to_string(v) + " must be positive and finite");
        }
      }
    }
    pr.k_scale = opt.k_scale;
    pr.v_scale = opt.v_scale;
  } else if (!opt.k_scale.empty() || !opt.v_scale.empty()) {
    bad_options("k_scale and v_scale are for fp8 caches, and this cache is " +
                std::string(dtype_name(p.cache_dtype())));
  }
  std::vector<char> used(static_cast<std::size_t>(pool), 0);
  for (int b = 0; b < pr.batch; ++b) {
    for (int i = 0; i < nblocks[std::size_t(b)]; ++i) {
      used[std::size_t(pr.block_tables[std::size_t(b) * pr.max_blocks_per_seq + i])] = 1;
    }
  }
  fill_normal(pr.query, rng.fork_seed());
  const uint64_t k_seed = rng.fork_seed();
  const uint64_t v_seed = rng.fork_seed();
  const auto fill_keys = [&] {
    fill_cache(pr.key_cache, k_seed, used, pr.k_scale, bs * p.head_dim, p.num_kv_heads);
  };
  const auto fill_values = [&] {
    fill_cache(pr.value_cache, v_seed, used, pr.v_scale, bs * p.head_dim, p.num_kv_heads);
  };
  const int threads = opt.threads > 0 ? opt.threads : int(std::thread::hardware_concurrency());
  // Side by side only where it pays for a thread: caches of 1 MiB and up (half a million
  // elements or more; a normal costs tens of nanoseconds to draw, so tens of milliseconds).
  if (threads >= 2 && pr.key_cache.data.size() >= (std::size_t(1) << 20)) {
    std::exception_ptr failed;
    std::thread keys([&] {
      try {
        fill_keys();
      } catch (...) {
        failed = std::current_exception();
      }
    });
    try {
      fill_values();
    } catch (...) {
      keys.join();
      throw;
    }
    keys.join();
    if (failed) {
      std::rethrow_exception(failed);
    }
  } else {
    fill_keys();
    fill_values();
  }
  if (opt.nan_tails) {
    // After every draw, so that the slots read hold what they hold without NaN tails. Tails are
    // private to their sequence (a shared prefix covers full blocks only).
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int b = 0; b < pr.batch; ++b) {
      const int len = k_lens[std::size_t(b)];
      if (len % bs == 0) {
        continue; // no last block, or a full one
      }
      const auto blk = std::size_t(pr.block_tables[std::size_t(b) * pr.max_blocks_per_seq +
                                                   std::size_t(nblocks[std::size_t(b)] - 1)]);
      for (int h = 0; h < p.num_kv_heads; ++h) {
        for (int slot = len % bs; slot < bs; ++slot) {
          const std::size_t at =
              ((blk * std::size_t(p.num_kv_heads) + std::size_t(h)) * std::size_t(bs) +
               std::size_t(slot)) *
              std::size_t(p.head_dim);
          for (int d = 0; d < p.head_dim; ++d) {
            pr.key_cache.set(at + std::size_t(d), nan);
            pr.value_cache.set(at + std::size_t(d), nan);
          }
        }
      }
    }
  }
  if (opt.kv_layout != KvLayout::HND) {
    pr = with_kv_layout(pr, opt.kv_layout);
  }
}

} // namespace

Problem make_decode_problem(const AttnParams& p, const std::vector<int>& context_lens,
                            const GenOptions& opt) {
  p.validate();
  Problem pr;
  pr.phase = Phase::decode;
  pr.params = p;
  pr.batch = int(context_lens.size());
  pr.seed = opt.seed;
  if (pr.batch <= 0) {
    bad_options("a decode batch needs at least one sequence");
  }
  for (std::size_t b = 0; b < context_lens.size(); ++b) {
    if (context_lens[b] < 0) {
      bad_options("context_lens[" + std::to_string(b) + "] = " + std::to_string(context_lens[b]) +
          " is negative");
    }
  }
  pr.context_lens.assign(context_lens.begin(), context_lens.end());
  pr.query = HostTensor(p.dtype, {pr.batch, p.num_heads, p.head_dim});
  build_cache_and_tables(pr, context_lens, opt);
  return pr;
}

Problem make_prefill_problem(const AttnParams& p, const std::vector<int>& q_lens,
                             const std::vector<int>& k_lens, const GenOptions& opt) {
  p.validate();
  if (q_lens.size() != k_lens.size()) {
    bad_options("prefill batch has " + std::to_string(q_lens.size()) + " query lengths but " +
        std::to_string(k_lens.size()) + " key lengths");
  }
  Problem pr;
  pr.phase = Phase::prefill;
  pr.params = p;
  pr.batch = int(q_lens.size());
  pr.seed = opt.seed;
  if (pr.batch <= 0) {
    bad_options("a prefill batch needs at least one sequence");
  }
  pr.cu_seqlens_q.assign(1, 0);
  pr.cu_seqlens_k.assign(1, 0);
  for (std::size_t b = 0; b < q_lens.size(); ++b) {
    if (q_lens[b] < 0 || k_lens[b] < 0) {
      bad_options("sequence " + std::to_string(b) + " has a negative length (q_len " +
          std::to_string(q_lens[b]) + ", k_len " + std::to_string(k_lens[b]) + ")");
    }
    pr.cu_seqlens_q.push_back(pr.cu_seqlens_q.back() + q_lens[b]);
    pr.cu_seqlens_k.push_back(pr.cu_seqlens_k.back() + k_lens[b]);
  }
  pr.query = HostTensor(p.dtype, {pr.cu_seqlens_q.back(), p.num_heads, p.head_dim});
  build_cache_and_tables(pr, k_lens, opt);
  return pr;
}

std::vector<int> edge_lengths(int block_size, const std::vector<int>& partition_sizes,
                              int max_len) {
  std::vector<int> e = {1, block_size - 1, block_size, block_size + 1, max_len};
  for (int ps : partition_sizes) {
    for (int k = 1; k <= 2; ++k) {
      e.push_back(k * ps - 1);
      e.push_back(k * ps);
      e.push_back(k * ps + 1);
    }
  }
  std::vector<int> out;
  for (int x : e) {
    if (x >= 1 && x <= max_len) {
      out.push_back(x);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int> ragged_lengths(uint64_t seed, int count, int block_size,
                                const std::vector<int>& partition_sizes, int max_len) {
  Rng rng(seed);
  std::vector<int> edges = edge_lengths(block_size, partition_sizes, max_len);
  for (std::size_t i = edges.size(); i > 1; --i) {
    std::swap(edges[i - 1], edges[std::size_t(rng.range(0, int64_t(i) - 1))]);
  }
  std::vector<int> out;
  for (int i = 0; i < count; ++i) {
    if (std::size_t(i) < edges.size()) {
      out.push_back(edges[std::size_t(i)]);
    } else {
      out.push_back(int(rng.range(1, std::max(1, max_len))));
    }
  }
  return out;
}

} // namespace attn
