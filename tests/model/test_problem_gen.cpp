// Tests of the seeded problem generator: determinism, block tables drawn from a larger pool,
// prefix sharing, the spare column, the data's distribution and shapes, and ragged edge lengths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "src/model/errors.h"
#include "src/model/problem.h"
#include "src/model/problem_gen.h"
#include "tests/support/problems.h"

using namespace attn;

using test::expect_input_error;
using test::gen;
using test::params;

namespace {

int blocks_for(int len, int bs) { return (len + bs - 1) / bs; }

// ---------------------------------------------------------------------------------------------
// Generator.

TEST(Generator, SameSeedGivesIdenticalBytes) {
  const AttnParams p = params();
  for (bool shared : {false, true}) {
    const Problem a = make_prefill_problem(p, {3, 17, 1}, {40, 17, 70}, gen(123, shared));
    const Problem b = make_prefill_problem(p, {3, 17, 1}, {40, 17, 70}, gen(123, shared));
    EXPECT_EQ(a.block_tables, b.block_tables);
    EXPECT_EQ(a.num_blocks, b.num_blocks);
    EXPECT_EQ(a.query.data, b.query.data);
    EXPECT_EQ(a.key_cache.data, b.key_cache.data);
    EXPECT_EQ(a.value_cache.data, b.value_cache.data);
    EXPECT_EQ(a.seed, 123u);
  }
  const Problem d1 = make_decode_problem(p, {5, 100, 33}, gen(9));
  const Problem d2 = make_decode_problem(p, {5, 100, 33}, gen(9));
  EXPECT_EQ(d1.block_tables, d2.block_tables);
  EXPECT_EQ(d1.query.data, d2.query.data);
  EXPECT_EQ(d1.key_cache.data, d2.key_cache.data);
  EXPECT_EQ(d1.value_cache.data, d2.value_cache.data);
}

// The key and value caches drawn side by side (GenOptions::threads) hold the bytes one thread
// draws: caches large enough to take the second thread, fp16 and fp8, per-head scales.
TEST(Generator, ThreadsDrawTheSameBytes) {
  AttnParams p = params();
  p.num_kv_heads = 2;
  p.head_dim = 128;
  p.block_size = 16;
  p.dtype = DType::f16;
  for (std::optional<DType> kv : {std::optional<DType>{}, std::optional{DType::fp8_e5m2}}) {
    p.kv_dtype = kv;
    GenOptions one = gen(77);
    if (p.fp8_cache()) {
      one.k_scale = {0.5f, 3.0f};
      one.v_scale = {0.25f};
    }
    GenOptions two = one;
    two.threads = 2;
    const Problem a = make_decode_problem(p, {3000, 17, 4000}, one);
    const Problem b = make_decode_problem(p, {3000, 17, 4000}, two);
    ASSERT_GE(a.key_cache.data.size(), std::size_t(1) << 20) << "too small to take a thread";
    EXPECT_EQ(a.block_tables, b.block_tables);
    EXPECT_EQ(a.query.data, b.query.data);
    EXPECT_EQ(a.key_cache.data, b.key_cache.data);
    EXPECT_EQ(a.value_cache.data, b.value_cache.data);
  }
}

// nan_tails: exactly the slots past each sequence's length in its last block become NaN, in
// both caches and every cache dtype; every other byte is the one the same seed gives without.
TEST(Generator, NanTailsAreExactlyTheUnreadSlotsOfLastBlocks) {
  for (DType cache : {DType::f16, DType::fp8_e4m3, DType::fp8_e5m2}) {
    AttnParams p = params(4, 2, 16, 16, DType::f16);
    p.dtype = DType::f16;
    if (cache != DType::f16) {
      p.kv_dtype = cache;
    }
    const std::vector<int> lens = {5, 16, 33, 1};
    GenOptions g;
    g.seed = 4;
    const Problem a = make_decode_problem(p, lens, g);
    g.nan_tails = true;
    const Problem b = make_decode_problem(p, lens, g);
    std::set<std::size_t> tail; // element indices of the HND caches
    const auto bs = std::size_t(p.block_size);
    const auto d = std::size_t(p.head_dim);
    const auto kvh = std::size_t(p.num_kv_heads);
    for (std::size_t s = 0; s < lens.size(); ++s) {
      const auto len = std::size_t(lens[s]);
      if (len % bs == 0) {
        continue;
      }
      const auto blk = std::size_t(b.block_tables[s * std::size_t(b.max_blocks_per_seq) + (len - 1) / bs]);
      for (std::size_t h = 0; h < kvh; ++h) {
        for (std::size_t slot = len % bs; slot < bs; ++slot) {
          for (std::size_t e = 0; e < d; ++e) {
            tail.insert(((blk * kvh + h) * bs + slot) * d + e);
          }
        }
      }
    }
    ASSERT_FALSE(tail.empty());
    for (const auto* c : {&b.key_cache, &b.value_cache}) {
      const HostTensor& clean = c == &b.key_cache ? a.key_cache : a.value_cache;
      const std::size_t esize = dtype_size(c->dtype);
      for (std::size_t i = 0; i < std::size_t(c->numel()); ++i) {
        if (tail.count(i) != 0) {
          ASSERT_TRUE(std::isnan(c->get(i))) << dtype_name(cache) << " " << i;
        } else {
          ASSERT_EQ(0, std::memcmp(c->data.data() + i * esize, clean.data.data() + i * esize, esize))
              << dtype_name(cache) << " " << i;
        }
      }
    }
  }
}

TEST(Generator, DifferentSeedsGiveDifferentData) {
  const AttnParams p = params();
  const Problem a = make_decode_problem(p, {5, 100, 33}, gen(1));
  const Problem b = make_decode_problem(p, {5, 100, 33}, gen(2));
  EXPECT_NE(a.block_tables, b.block_tables);
  EXPECT_NE(a.query.data, b.query.data);
  EXPECT_NE(a.key_cache.data, b.key_cache.data);
  EXPECT_NE(a.value_cache.data, b.value_cache.data);
  // q, k and v come from different streams: no tensor repeats another's values.
  EXPECT_NE(a.query.get(0), a.key_cache.get(0));
  EXPECT_NE(a.key_cache.get(0), a.value_cache.get(0));
}

// The blocks the block tables hold are standard normal; the pool's other blocks (never read by a
// correct kernel) hold random finite values of the same order. All are values of the dtype.
TEST(Generator, DataIsStandardNormalRoundedToTheDtype) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::fp8_e4m3, DType::fp8_e5m2}) {
    AttnParams p = params(8, 2, 64, 16, is_fp8(t) ? DType::bf16 : t);
    p.kv_dtype = t;
    const Problem pr = make_decode_problem(p, {500}, gen(4));
    const HostTensor& k = pr.key_cache;
    std::vector<char> used(std::size_t(pr.num_blocks), 0);
    for (int i = 0; i < blocks_for(500, 16); ++i) {
      used[std::size_t(pr.block_tables[std::size_t(i)])] = 1;
    }
    double sum[2] = {0, 0}, sum2[2] = {0, 0}, count[2] = {0, 0};
    int zeros = 0;
    const auto n = std::size_t(k.numel());
    const std::size_t block_elems = n / std::size_t(pr.num_blocks);
    for (std::size_t i = 0; i < n; ++i) {
      const double x = k.get(i);
      ASSERT_TRUE(std::isfinite(x));
      EXPECT_EQ(float(x), round_to(t, float(x))); // representable in the dtype
      const int u = used[i / block_elems];
      sum[u] += x;
      sum2[u] += x * x;
      count[u] += 1;
      zeros += x == 0.0;
    }
    // fp8_e5m2 keeps two mantissa bits: rounding adds about 1% to the variance.
    EXPECT_NEAR(sum[1] / count[1], 0.0, 0.01) << dtype_name(t);
    EXPECT_NEAR(sum2[1] / count[1], 1.0, is_fp8(t) ? 0.04 : 0.02) << dtype_name(t);
    EXPECT_GT(count[0], count[1]) << dtype_name(t); // the pool is three times what is read
    EXPECT_NEAR(sum[0] / count[0], 0.0, 0.02) << dtype_name(t);
    EXPECT_GT(sum2[0] / count[0], 0.5) << dtype_name(t);
    EXPECT_LT(sum2[0] / count[0], 2.0) << dtype_name(t);
    EXPECT_LT(zeros, is_fp8(t) ? 400 : 10) << dtype_name(t); // "never zeros" (fp8: the tails)
  }
}

// Every block id a sequence reads, per sequence.
std::vector<std::vector<int32_t>> used_blocks(const Problem& pr) {
  std::vector<std::vector<int32_t>> out;
  for (int b = 0; b < pr.batch; ++b) {
    const int used = blocks_for(pr.k_len(b), pr.params.block_size);
    out.emplace_back(pr.block_tables.begin() + std::ptrdiff_t(b) * pr.max_blocks_per_seq,
                     pr.block_tables.begin() + std::ptrdiff_t(b) * pr.max_blocks_per_seq + used);
  }
  return out;
}

TEST(Generator, BlockTablesArePermutationsOfAPoolThreeTimesLarger) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const std::vector<int> ctx = {1, 15, 16, 17, 200, 513, 64};
    const Problem pr = make_decode_problem(params(), ctx, gen(seed));
    int needed = 0;
    for (int c : ctx) {
      needed += blocks_for(c, 16);
    }
    EXPECT_EQ(pr.num_blocks, 3 * needed) << "seed=" << seed;
    std::set<int32_t> seen;
    int out_of_order = 0;
    for (const auto& row : used_blocks(pr)) {
      for (std::size_t i = 0; i < row.size(); ++i) {
        EXPECT_GE(row[i], 0) << "seed=" << seed;
        EXPECT_LT(row[i], pr.num_blocks) << "seed=" << seed;
        EXPECT_TRUE(seen.insert(row[i]).second)
            << "seed=" << seed << ": block " << row[i] << " used twice without prefix sharing";
        out_of_order += i > 0 && row[i] != row[i - 1] + 1;
      }
    }
    EXPECT_EQ(int(seen.size()), needed) << "seed=" << seed;
    EXPECT_GT(out_of_order, needed / 2) << "seed=" << seed << ": tables look sequential";
    // The used blocks are scattered over the whole pool, not packed at its start.
    EXPECT_GT(*seen.rbegin(), needed) << "seed=" << seed;
    EXPECT_NO_THROW(pr.validate()) << "seed=" << seed;
  }
}

TEST(Generator, PoolFactorSizesThePool) {
  const Problem one = make_decode_problem(params(), {160, 33}, gen(3, false, 1.0));
  EXPECT_EQ(one.num_blocks, 10 + 3);
  const Problem half = make_decode_problem(params(), {160, 33}, gen(3, false, 1.5));
  EXPECT_EQ(half.num_blocks, 20); // ceil(13 * 1.5)
  expect_input_error([] { (void)make_decode_problem(params(), {16}, gen(3, false, 0.5)); },
                     {"pool_factor", "0.5"}, "pool_factor below 1");
}

TEST(Generator, SharedPrefixBlocksAreIdenticalAcrossSequences) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    // Shortest sequence has 6 full blocks of 16: the first 3 are shared.
    const std::vector<int> ctx = {100, 300, 96, 257};
    const Problem pr = make_decode_problem(params(), ctx, gen(seed, /*shared_prefix=*/true));
    const auto rows = used_blocks(pr);
    const int shared = 3;
    std::map<int32_t, int> uses;
    for (const auto& row : rows) {
      for (int i = 0; i < shared; ++i) {
        EXPECT_EQ(row[std::size_t(i)], rows[0][std::size_t(i)]) << "seed=" << seed;
      }
      for (int32_t blk : row) {
        ++uses[blk];
      }
    }
    for (const auto& [blk, n] : uses) {
      const bool in_prefix =
          std::find(rows[0].begin(), rows[0].begin() + shared, blk) != rows[0].begin() + shared;
      EXPECT_EQ(n, in_prefix ? int(ctx.size()) : 1) << "seed=" << seed << " block " << blk;
    }
    // The pool is sized from the distinct blocks: 3 shared plus every private tail block.
    int needed = shared;
    for (int c : ctx) {
      needed += blocks_for(c, 16) - shared;
    }
    EXPECT_EQ(pr.num_blocks, 3 * needed) << "seed=" << seed;
    // Shared blocks mean shared keys: position j < 48 reads the same bytes in every sequence.
    for (int b = 1; b < pr.batch; ++b) {
      for (int j : {0, 17, 47}) {
        EXPECT_EQ(pr.kv_offset(b, 1, j), pr.kv_offset(0, 1, j)) << "seed=" << seed;
      }
      EXPECT_NE(pr.kv_offset(b, 1, 48), pr.kv_offset(0, 1, 48)) << "seed=" << seed;
    }
    EXPECT_NO_THROW(pr.validate()) << "seed=" << seed;
  }
  // A sequence with a single full block shares it; with no full block nothing is shared.
  const Problem small = make_decode_problem(params(), {16, 20}, gen(5, true));
  EXPECT_EQ(used_blocks(small)[0][0], used_blocks(small)[1][0]);
  const Problem none = make_decode_problem(params(), {15, 40}, gen(5, true));
  EXPECT_NE(used_blocks(none)[0][0], used_blocks(none)[1][0]);
}

TEST(Generator, SpareColumnIsNeverRead) {
  const AttnParams p = params(4, 2, 16, 4, DType::f32);
  Problem pr = make_prefill_problem(p, {3, 9, 2}, {9, 9, 13}, gen(8));
  // One column beyond the longest sequence's blocks (13 keys / 4 = 4 blocks).
  EXPECT_EQ(pr.max_blocks_per_seq, 4 + 1);
  const ReferenceResult before = reference_attention(pr);
  // Replace every entry past a sequence's used blocks with -1: nothing may change.
  for (int b = 0; b < pr.batch; ++b) {
    for (int i = blocks_for(pr.k_len(b), 4); i < pr.max_blocks_per_seq; ++i) {
      pr.block_tables[std::size_t(b) * pr.max_blocks_per_seq + i] = -1;
    }
  }
  EXPECT_NO_THROW(pr.validate());
  const ReferenceResult after = reference_attention(pr);
  EXPECT_EQ(before.out, after.out);
  EXPECT_EQ(before.lse, after.lse);
}

TEST(Generator, ShapesFollowTheSpecLayout) {
  const AttnParams p = params(12, 4, 32, 8, DType::bf16);
  const Problem d = make_decode_problem(p, {7, 0, 30}, gen(2));
  EXPECT_EQ(d.query.shape, (std::vector<int64_t>{3, 12, 32}));
  EXPECT_EQ(d.key_cache.shape, (std::vector<int64_t>{d.num_blocks, 4, 8, 32}));
  EXPECT_EQ(d.value_cache.shape, d.key_cache.shape);
  EXPECT_EQ(d.num_rows(), 3);
  EXPECT_EQ(d.max_k_len(), 30);
  const Problem f = make_prefill_problem(p, {5, 0, 2}, {5, 3, 9}, gen(2));
  EXPECT_EQ(f.cu_seqlens_q, (std::vector<int32_t>{0, 5, 5, 7}));
  EXPECT_EQ(f.cu_seqlens_k, (std::vector<int32_t>{0, 5, 8, 17}));
  EXPECT_EQ(f.query.shape, (std::vector<int64_t>{7, 12, 32}));
  EXPECT_EQ(f.num_rows(), 7);
  EXPECT_EQ(f.max_q_len(), 5);
  EXPECT_EQ(f.q_start(2), 5);
  EXPECT_EQ(f.k_len(1), 3);
  // kv_offset follows [num_blocks, num_kv_heads, block_size, head_dim].
  const int32_t blk = f.block_tables[std::size_t(2) * f.max_blocks_per_seq + 1];
  EXPECT_EQ(f.kv_offset(2, 3, 8 + 5), ((int64_t(blk) * 4 + 3) * 8 + 5) * 32);
}

// ---------------------------------------------------------------------------------------------
// Ragged lengths.

TEST(RaggedLengths, EdgeLengthsAreTheSpecEdges) {
  EXPECT_EQ(edge_lengths(16, {512}, 2000),
            (std::vector<int>{1, 15, 16, 17, 511, 512, 513, 1023, 1024, 1025, 2000}));
  EXPECT_EQ(edge_lengths(16, {256, 512}, 600),
            (std::vector<int>{1, 15, 16, 17, 255, 256, 257, 511, 512, 513, 600}));
  // Edges past max_len are dropped, block_size 1 has no "bs - 1".
  EXPECT_EQ(edge_lengths(1, {}, 5), (std::vector<int>{1, 2, 5}));
  EXPECT_EQ(edge_lengths(16, {512}, 16), (std::vector<int>{1, 15, 16}));
}

TEST(RaggedLengths, HitEveryEdgeThenRandomLengths) {
  const std::vector<int> edges = edge_lengths(16, {512}, 3000);
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const std::vector<int> l = ragged_lengths(seed, 40, 16, {512}, 3000);
    ASSERT_EQ(l.size(), 40u);
    for (int e : edges) {
      EXPECT_NE(std::find(l.begin(), l.begin() + std::ptrdiff_t(edges.size()), e),
                l.begin() + std::ptrdiff_t(edges.size()))
          << "seed=" << seed << ": edge " << e << " missing";
    }
    for (int x : l) {
      EXPECT_GE(x, 1);
      EXPECT_LE(x, 3000);
    }
    // The tail is random, not a repeat of the edges.
    std::set<int> tail(l.begin() + std::ptrdiff_t(edges.size()), l.end());
    EXPECT_GT(tail.size(), 20u) << "seed=" << seed;
    EXPECT_EQ(l, ragged_lengths(seed, 40, 16, {512}, 3000)) << "seed=" << seed;
  }
  EXPECT_NE(ragged_lengths(1, 40, 16, {512}, 3000), ragged_lengths(2, 40, 16, {512}, 3000));
  // Fewer lengths than edges: a subset of the edges.
  for (int x : ragged_lengths(3, 4, 16, {512}, 3000)) {
    EXPECT_NE(std::find(edges.begin(), edges.end(), x), edges.end());
  }
}

} // namespace
