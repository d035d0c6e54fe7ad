// Tests of the KV-cache layouts: names, SPEC.md shapes, element offsets checked by hand and as
// bijections onto the cache, with_kv_layout round trips bit for bit, the generator giving the same
// logical values in every layout, and validation naming the layout.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "src/model/errors.h"
#include "src/model/kv_layout.h"
#include "src/model/problem.h"
#include "src/model/problem_gen.h"
#include "tests/support/problems.h"

using namespace attn;
using test::params;

namespace {

using Shape = std::vector<int64_t>;

constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "<no InputError>";
}

// Every logical key and value element of every sequence, read through the problem's layout.
std::vector<float> logical_kv(const Problem& pr) {
  std::vector<float> v;
  for (int b = 0; b < pr.batch; ++b) {
    for (int kvh = 0; kvh < pr.params.num_kv_heads; ++kvh) {
      for (int j = 0; j < pr.k_len(b); ++j) {
        for (int d = 0; d < pr.params.head_dim; ++d) {
          v.push_back(pr.key_cache.get(std::size_t(pr.key_index(b, kvh, j, d))));
          v.push_back(pr.value_cache.get(std::size_t(pr.value_index(b, kvh, j, d))));
        }
      }
    }
  }
  return v;
}

} // namespace

TEST(KvLayout, NamesAndParsing) {
  EXPECT_STREQ(kv_layout_name(KvLayout::HND), "HND");
  EXPECT_STREQ(kv_layout_name(KvLayout::NHD), "NHD");
  EXPECT_STREQ(kv_layout_name(KvLayout::vllm), "vllm");
  for (KvLayout l : kAllKvLayouts) {
    EXPECT_EQ(parse_kv_layout(kv_layout_name(l)), l);
  }
  EXPECT_EQ(parse_kv_layout("hnd"), KvLayout::HND);
  EXPECT_EQ(parse_kv_layout("Nhd"), KvLayout::NHD);
  EXPECT_EQ(parse_kv_layout("VLLM"), KvLayout::vllm);
  // The numbering of the plugin ABI's attn_kv_layout.
  EXPECT_EQ(int(KvLayout::HND), 0);
  EXPECT_EQ(int(KvLayout::NHD), 1);
  EXPECT_EQ(int(KvLayout::vllm), 2);
  for (const char* s : {"", "HDN", "nhd ", "paged"}) {
    const std::string msg = message_of([&] { (void)parse_kv_layout(s); });
    EXPECT_NE(msg.find("kv_layout '" + std::string(s) + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("HND, NHD, vllm"), std::string::npos) << msg;
  }
}

TEST(KvLayout, ShapesFollowTheSpecTable) {
  // 10 blocks, 4 kv heads, block_size 16, head_dim 128.
  for (DType t : kDtypes) {
    EXPECT_EQ(key_cache_shape(KvLayout::HND, t, 10, 4, 16, 128), (Shape{10, 4, 16, 128}));
    EXPECT_EQ(value_cache_shape(KvLayout::HND, t, 10, 4, 16, 128), (Shape{10, 4, 16, 128}));
    EXPECT_EQ(key_cache_shape(KvLayout::NHD, t, 10, 4, 16, 128), (Shape{10, 16, 4, 128}));
    EXPECT_EQ(value_cache_shape(KvLayout::NHD, t, 10, 4, 16, 128), (Shape{10, 16, 4, 128}));
    EXPECT_EQ(value_cache_shape(KvLayout::vllm, t, 10, 4, 16, 128), (Shape{10, 4, 128, 16}));
  }
  EXPECT_EQ(vllm_x(DType::f32), 4);
  EXPECT_EQ(vllm_x(DType::f16), 8);
  EXPECT_EQ(vllm_x(DType::bf16), 8);
  EXPECT_EQ(key_cache_shape(KvLayout::vllm, DType::f32, 10, 4, 16, 128), (Shape{10, 4, 32, 16, 4}));
  EXPECT_EQ(key_cache_shape(KvLayout::vllm, DType::f16, 10, 4, 16, 128), (Shape{10, 4, 16, 16, 8}));
  EXPECT_EQ(key_cache_shape(KvLayout::vllm, DType::bf16, 3, 1, 8, 64), (Shape{3, 1, 8, 8, 8}));
  // head_dim not a multiple of x: refused, naming x and head_dim (fp32's x = 4 still divides 12).
  EXPECT_EQ(key_cache_shape(KvLayout::vllm, DType::f32, 2, 1, 4, 12), (Shape{2, 1, 3, 4, 4}));
  for (DType t : {DType::f16, DType::bf16}) {
    const std::string msg =
        message_of([&] { (void)key_cache_shape(KvLayout::vllm, t, 2, 1, 4, 12); });
    EXPECT_NE(msg.find("kv_layout vllm"), std::string::npos) << msg;
    EXPECT_NE(msg.find("x = 8"), std::string::npos) << msg;
    EXPECT_NE(msg.find("head_dim is 12"), std::string::npos) << msg;
    EXPECT_THROW((void)value_cache_shape(KvLayout::vllm, t, 2, 1, 4, 12), InputError);
    EXPECT_THROW((void)kv_cache_geometry(KvLayout::vllm, t, 1, 4, 12), InputError);
  }
}

TEST(KvLayout, ElementOffsetsByHand) {
  // 2 kv heads, block_size 4, head_dim 16; element (blk 3, kvh 1, slot 2, d 13).
  const auto g = [](KvLayout l, DType t) { return kv_cache_geometry(l, t, 2, 4, 16); };
  EXPECT_EQ(g(KvLayout::HND, DType::f16).key_index(3, 1, 2, 13), ((3 * 2 + 1) * 4 + 2) * 16 + 13);
  EXPECT_EQ(g(KvLayout::HND, DType::f16).value_index(3, 1, 2, 13), ((3 * 2 + 1) * 4 + 2) * 16 + 13);
  EXPECT_EQ(g(KvLayout::NHD, DType::f16).key_index(3, 1, 2, 13), ((3 * 4 + 2) * 2 + 1) * 16 + 13);
  EXPECT_EQ(g(KvLayout::NHD, DType::f16).value_index(3, 1, 2, 13), ((3 * 4 + 2) * 2 + 1) * 16 + 13);
  // vllm fp16, x = 8: key [blk, kvh, d / 8, slot, d % 8] of shape [.., 2, 2, 4, 8].
  EXPECT_EQ(g(KvLayout::vllm, DType::f16).key_index(3, 1, 2, 13),
            ((((3 * 2 + 1) * 2 + 1) * 4 + 2) * 8) + 5);
  // vllm fp32, x = 4: [.., 2, 4, 4, 4]; d 13 is chunk 3, lane 1.
  EXPECT_EQ(g(KvLayout::vllm, DType::f32).key_index(3, 1, 2, 13),
            ((((3 * 2 + 1) * 4 + 3) * 4 + 2) * 4) + 1);
  // vllm value [blk, kvh, d, slot].
  EXPECT_EQ(g(KvLayout::vllm, DType::bf16).value_index(3, 1, 2, 13),
            ((3 * 2 + 1) * 16 + 13) * 4 + 2);
  // 64-bit offsets past 2^31 elements.
  EXPECT_EQ(kv_cache_geometry(KvLayout::NHD, DType::f16, 8, 16, 256).key_index(1 << 20, 7, 9, 3),
            ((int64_t(1 << 20) * 16 + 9) * 8 + 7) * 256 + 3);
}

// In every layout and dtype, the key offsets and the value offsets each visit every element of
// their cache exactly once, and agree with the row-major index of SPEC.md's coordinates.
TEST(KvLayout, OffsetsAreBijectionsOntoTheCache) {
  const int64_t N = 3;
  const int H = 2, B = 5, D = 16;
  for (KvLayout l : kAllKvLayouts) {
    for (DType t : kDtypes) {
      SCOPED_TRACE(std::string(kv_layout_name(l)) + " " + std::string(dtype_name(t)));
      const KvCacheGeometry g = kv_cache_geometry(l, t, H, B, D);
      const Shape ks = key_cache_shape(l, t, N, H, B, D);
      const Shape vs = value_cache_shape(l, t, N, H, B, D);
      const auto row_major = [](const Shape& s, const std::vector<int64_t>& c) {
        int64_t i = 0;
        for (std::size_t k = 0; k < s.size(); ++k) {
          i = i * s[k] + c[k];
        }
        return i;
      };
      std::vector<int> key_hits(std::size_t(N * g.block_elems()));
      std::vector<int> value_hits(key_hits.size());
      for (int64_t blk = 0; blk < N; ++blk) {
        for (int h = 0; h < H; ++h) {
          for (int s = 0; s < B; ++s) {
            for (int d = 0; d < D; ++d) {
              const int64_t k = g.key_index(blk, h, s, d);
              const int64_t v = g.value_index(blk, h, s, d);
              ASSERT_GE(k, 0);
              ASSERT_LT(k, int64_t(key_hits.size()));
              ASSERT_GE(v, 0);
              ASSERT_LT(v, int64_t(value_hits.size()));
              ++key_hits[std::size_t(k)];
              ++value_hits[std::size_t(v)];
              const int x = vllm_x(t);
              switch (l) {
              case KvLayout::HND:
                EXPECT_EQ(k, row_major(ks, {blk, h, s, d}));
                EXPECT_EQ(v, row_major(vs, {blk, h, s, d}));
                break;
              case KvLayout::NHD:
                EXPECT_EQ(k, row_major(ks, {blk, s, h, d}));
                EXPECT_EQ(v, row_major(vs, {blk, s, h, d}));
                break;
              case KvLayout::vllm:
                EXPECT_EQ(k, row_major(ks, {blk, h, d / x, s, d % x}));
                EXPECT_EQ(v, row_major(vs, {blk, h, d, s}));
                break;
              }
            }
          }
        }
      }
      for (std::size_t i = 0; i < key_hits.size(); ++i) {
        ASSERT_EQ(key_hits[i], 1) << "key element " << i;
        ASSERT_EQ(value_hits[i], 1) << "value element " << i;
      }
    }
  }
}

TEST(WithKvLayout, RoundTripsThroughEveryLayoutBitForBit) {
  for (DType t : kDtypes) {
    for (uint64_t seed : {1u, 2u}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " seed=" + std::to_string(seed));
      const Problem hnd =
          make_prefill_problem(params(8, 2, 64, 16, t), {3, 17, 1}, {40, 17, 100}, {.seed = seed});
      Problem p = hnd;
      // Every byte pattern must survive, NaN payloads and -0 included.
      p.key_cache.data[0] = std::byte{0xff};
      p.key_cache.data[1] = std::byte{0x7f};
      p.value_cache.data[p.value_cache.data.size() - 1] = std::byte{0x80};
      const Problem nhd = with_kv_layout(p, KvLayout::NHD);
      const Problem vllm = with_kv_layout(nhd, KvLayout::vllm);
      const Problem back = with_kv_layout(vllm, KvLayout::HND);
      EXPECT_EQ(nhd.kv_layout, KvLayout::NHD);
      EXPECT_EQ(vllm.kv_layout, KvLayout::vllm);
      EXPECT_EQ(back.kv_layout, KvLayout::HND);
      EXPECT_EQ(vllm.key_cache.shape, key_cache_shape(KvLayout::vllm, t, p.num_blocks, 2, 16, 64));
      EXPECT_EQ(vllm.value_cache.shape,
                value_cache_shape(KvLayout::vllm, t, p.num_blocks, 2, 16, 64));
      EXPECT_EQ(back.key_cache.shape, p.key_cache.shape);
      EXPECT_EQ(back.key_cache.data, p.key_cache.data);
      EXPECT_EQ(back.value_cache.data, p.value_cache.data);
      // Other directions, straight.
      EXPECT_EQ(with_kv_layout(p, KvLayout::vllm).key_cache.data, vllm.key_cache.data);
      EXPECT_EQ(with_kv_layout(vllm, KvLayout::NHD).value_cache.data, nhd.value_cache.data);
      EXPECT_EQ(with_kv_layout(nhd, KvLayout::HND).key_cache.data, p.key_cache.data);
      // Every element of every physical block (used or not) lands where the offsets say.
      for (const Problem* q : {&nhd, &vllm}) {
        const KvCacheGeometry from = p.kv_geometry();
        const KvCacheGeometry to = q->kv_geometry();
        for (int64_t blk = 0; blk < p.num_blocks; ++blk) {
          for (int h = 0; h < 2; ++h) {
            for (int s = 0; s < 16; ++s) {
              for (int d = 0; d < 64; ++d) {
                const std::size_t es = dtype_size(t);
                ASSERT_EQ(0, std::memcmp(
                                 &p.key_cache.data[std::size_t(from.key_index(blk, h, s, d)) * es],
                                 &q->key_cache.data[std::size_t(to.key_index(blk, h, s, d)) * es],
                                 es));
                ASSERT_EQ(0,
                          std::memcmp(
                              &p.value_cache.data[std::size_t(from.value_index(blk, h, s, d)) * es],
                              &q->value_cache.data[std::size_t(to.value_index(blk, h, s, d)) * es],
                              es));
              }
            }
          }
        }
      }
    }
  }
}

TEST(WithKvLayout, KeepsEverythingElseAndIsACopyWhenTheLayoutIsTheSame) {
  const Problem p = make_decode_problem(params(4, 4, 32, 8, DType::bf16), {1, 7, 8, 9},
                                        {.seed = 9, .shared_prefix = true});
  const Problem same = with_kv_layout(p, KvLayout::HND);
  EXPECT_EQ(same.key_cache.data, p.key_cache.data);
  EXPECT_EQ(same.value_cache.data, p.value_cache.data);
  const Problem q = with_kv_layout(p, KvLayout::vllm);
  EXPECT_EQ(q.phase, p.phase);
  EXPECT_EQ(q.params.describe(), p.params.describe());
  EXPECT_EQ(q.batch, p.batch);
  EXPECT_EQ(q.num_blocks, p.num_blocks);
  EXPECT_EQ(q.max_blocks_per_seq, p.max_blocks_per_seq);
  EXPECT_EQ(q.block_tables, p.block_tables);
  EXPECT_EQ(q.context_lens, p.context_lens);
  EXPECT_EQ(q.cu_seqlens_q, p.cu_seqlens_q);
  EXPECT_EQ(q.cu_seqlens_k, p.cu_seqlens_k);
  EXPECT_EQ(q.query.data, p.query.data);
  EXPECT_EQ(q.seed, p.seed);
  EXPECT_NO_THROW(q.validate());
  EXPECT_NE(q.describe().find("kv_layout=vllm"), std::string::npos) << q.describe();
  EXPECT_EQ(p.describe().find("kv_layout"), std::string::npos) << p.describe();
  // Caches that do not have the shapes of the declared layout are refused, not read.
  Problem wrong = p;
  wrong.kv_layout = KvLayout::vllm;
  const std::string msg = message_of([&] { (void)with_kv_layout(wrong, KvLayout::HND); });
  EXPECT_NE(msg.find("key_cache has shape"), std::string::npos) << msg;
  EXPECT_NE(msg.find("for kv_layout vllm"), std::string::npos) << msg;
}

TEST(WithKvLayout, GeneratorGivesTheSameLogicalValuesInEveryLayout) {
  for (DType t : kDtypes) {
    const AttnParams p = params(8, 2, 64, 16, t);
    const Problem hnd = make_decode_problem(p, {1, 15, 16, 17, 100}, {.seed = 42});
    const Problem hnd_pf = make_prefill_problem(p, {4, 1}, {33, 0}, {.seed = 43});
    const std::vector<float> want = logical_kv(hnd);
    const std::vector<float> want_pf = logical_kv(hnd_pf);
    for (KvLayout l : kAllKvLayouts) {
      SCOPED_TRACE(std::string(kv_layout_name(l)) + " " + std::string(dtype_name(t)));
      const Problem pr = make_decode_problem(p, {1, 15, 16, 17, 100}, {.seed = 42, .kv_layout = l});
      EXPECT_EQ(pr.kv_layout, l);
      EXPECT_NO_THROW(pr.validate());
      EXPECT_EQ(pr.key_cache.shape, key_cache_shape(l, t, hnd.num_blocks, 2, 16, 64));
      EXPECT_EQ(pr.block_tables, hnd.block_tables);
      EXPECT_EQ(pr.query.data, hnd.query.data);
      EXPECT_EQ(logical_kv(pr), want);
      const Problem pf = make_prefill_problem(p, {4, 1}, {33, 0}, {.seed = 43, .kv_layout = l});
      EXPECT_EQ(pf.kv_layout, l);
      EXPECT_EQ(logical_kv(pf), want_pf);
      // The same bytes as rearranging the HND problem.
      EXPECT_EQ(pr.key_cache.data, with_kv_layout(hnd, l).key_cache.data);
      EXPECT_EQ(pr.value_cache.data, with_kv_layout(hnd, l).value_cache.data);
    }
  }
}

TEST(WithKvLayout, ValidateNamesTheLayoutAndItsShape) {
  const Problem p = make_decode_problem(params(4, 2, 64, 16, DType::f16), {40}, {.seed = 1});
  const std::string n = std::to_string(p.num_blocks);
  Problem t = p;
  t.kv_layout = KvLayout::NHD; // HND caches declared as NHD
  std::string msg = message_of([&] { t.validate(); });
  EXPECT_NE(msg.find("key_cache has shape [" + n + ", 2, 16, 64], expected [" + n +
                     ", 16, 2, 64] for kv_layout NHD [num_blocks, block_size, num_kv_heads, "
                     "head_dim]"),
            std::string::npos)
      << msg;
  t = with_kv_layout(p, KvLayout::vllm);
  t.value_cache = HostTensor(DType::f16, {p.num_blocks, 2, 16, 64}); // HND value, vllm key
  msg = message_of([&] { t.validate(); });
  EXPECT_NE(msg.find("value_cache has shape [" + n + ", 2, 16, 64], expected [" + n +
                     ", 2, 64, 16] for kv_layout vllm [num_blocks, num_kv_heads, head_dim, "
                     "block_size]"),
            std::string::npos)
      << msg;
  t = with_kv_layout(p, KvLayout::vllm);
  t.key_cache.shape = {p.num_blocks, 2, 16, 16, 4}; // x = 4 is fp32's, not fp16's
  msg = message_of([&] { t.validate(); });
  EXPECT_NE(msg.find("expected [" + n +
                     ", 2, 8, 16, 8] for kv_layout vllm [num_blocks, "
                     "num_kv_heads, head_dim / x, block_size, x]"),
            std::string::npos)
      << msg;
}

// Sweeps rearrange caches of hundreds of MB; the conversion moves contiguous runs, so 64 MiB
// takes well under a second even in unoptimised or sanitized builds on a slow machine.
TEST(WithKvLayout, RearrangesLargeCachesQuickly) {
  const AttnParams p = params(8, 8, 128, 16, DType::f16);
  const Problem pr = make_decode_problem(p, {16}, {.seed = 3, .pool_factor = 1.0});
  Problem big = pr;
  big.num_blocks = 2048; // 2048 blocks x 8 heads x 16 x 128 x 2 bytes = 64 MiB per cache
  big.key_cache = HostTensor(p.dtype, {big.num_blocks, 8, 16, 128});
  big.value_cache = HostTensor(p.dtype, {big.num_blocks, 8, 16, 128});
  const auto t0 = std::chrono::steady_clock::now();
  const Problem v = with_kv_layout(big, KvLayout::vllm);
  const Problem n = with_kv_layout(v, KvLayout::NHD);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(n.key_cache.data.size(), big.key_cache.data.size());
  EXPECT_LT(s, 20.0) << "4 x 64 MiB rearranged in " << s << " s";
  RecordProperty("seconds_for_4x64MiB", std::to_string(s));
}
