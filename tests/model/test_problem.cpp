// Tests of the problem model: validation messages and the byte and pair counts (the seeded
// generator's own tests are in test_problem_gen.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <initializer_list>
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

// ---------------------------------------------------------------------------------------------
// Validation.

TEST(Validate, GeneratedProblemsAreValid) {
  EXPECT_NO_THROW(make_decode_problem(params(), {1, 0, 513}, gen(1)).validate());
  EXPECT_NO_THROW(make_prefill_problem(params(), {4, 0, 9}, {2, 5, 9}, gen(1)).validate());
}

TEST(Validate, ParamsErrorsNameFieldAndValue) {
  expect_input_error([] { params(6, 4).validate(); }, {"num_heads 6", "num_kv_heads 4"},
                     "heads not a multiple");
  expect_input_error([] { params(8, 0).validate(); }, {"num_kv_heads 0"}, "zero kv heads");
  expect_input_error([] { params(-8, 2).validate(); }, {"num_heads -8"}, "negative heads");
  expect_input_error([] { params(8, 2, 12).validate(); }, {"head_dim 12"}, "head_dim 12");
  expect_input_error([] { params(8, 2, 1024).validate(); }, {"head_dim 1024"}, "head_dim 1024");
  expect_input_error([] { params(8, 2, 0).validate(); }, {"head_dim 0"}, "head_dim 0");
  expect_input_error([] { params(8, 2, 64, 0).validate(); }, {"block_size 0"}, "block_size 0");
  expect_input_error([] { params(8, 2, 64, 4096).validate(); }, {"block_size 4096"},
                     "block_size 4096");
  expect_input_error(
      [] {
        AttnParams p = params();
        p.window_left = -2;
        p.validate();
      },
      {"window_left -2"}, "window_left");
  expect_input_error(
      [] {
        AttnParams p = params();
        p.window_right = -7;
        p.validate();
      },
      {"window_right -7"}, "window_right");
  expect_input_error(
      [] {
        AttnParams p = params();
        p.softcap = -1.0;
        p.validate();
      },
      {"softcap -1"}, "softcap");
  expect_input_error(
      [] {
        AttnParams p = params();
        p.scale = 0.0;
        p.validate();
      },
      {"scale 0"}, "scale");
  // The generators validate their parameters before allocating.
  expect_input_error([] { (void)make_decode_problem(params(6, 4), {4}, gen(1)); }, {"num_heads 6"},
                     "decode generator");
  expect_input_error([] { (void)make_prefill_problem(params(8, 2, 20), {4}, {4}, gen(1)); },
                     {"head_dim 20"}, "prefill generator");
}

TEST(Validate, NegativeLengthsAreNamed) {
  expect_input_error(
      [] {
        (void)make_decode_problem(params(), {4, -5}, gen(1));
      },
      {"context_lens[1]", "-5"}, "generator decode length");
  expect_input_error(
      [] {
        (void)make_prefill_problem(params(), {2, -3}, {4, 4}, gen(1));
      },
      {"sequence 1", "-3"}, "generator q length");
  expect_input_error(
      [] {
        (void)make_prefill_problem(params(), {2}, {4, 4}, gen(1));
      },
      {"1 query lengths", "2 key lengths"}, "generator length counts");
  Problem d = make_decode_problem(params(), {4, 30}, gen(1));
  d.context_lens[1] = -5;
  expect_input_error([&] { d.validate(); }, {"context_lens[1]", "-5"}, "decode length");
  Problem f = make_prefill_problem(params(), {2, 3, 1}, {4, 4, 8}, gen(1));
  f.cu_seqlens_k = {0, 4, 2, 10};
  expect_input_error([&] { f.validate(); }, {"cu_seqlens_k", "index 2", "4 -> 2"},
                     "decreasing cu_seqlens_k");
}

TEST(Validate, CuSeqlensMustStartAtZeroAndHaveBatchPlusOneEntries) {
  Problem f = make_prefill_problem(params(), {2, 3}, {4, 4}, gen(1));
  Problem g = f;
  g.cu_seqlens_q = {1, 3, 6};
  expect_input_error([&] { g.validate(); }, {"cu_seqlens_q[0] = 1"}, "cu_seqlens_q[0]");
  g = f;
  g.cu_seqlens_q = {0, 3, 2};
  expect_input_error([&] { g.validate(); }, {"cu_seqlens_q", "decreases", "3 -> 2"},
                     "decreasing cu_seqlens_q");
  g = f;
  g.cu_seqlens_k = {0, 4};
  expect_input_error([&] { g.validate(); }, {"cu_seqlens_k has 2 entries", "3"},
                     "short cu_seqlens_k");
  Problem d = make_decode_problem(params(), {4, 30}, gen(1));
  d.context_lens.push_back(3);
  expect_input_error([&] { d.validate(); }, {"context_lens has 3 entries", "batch 2"},
                     "context_lens count");
}

TEST(Validate, BlockTableErrorsNameTheEntry) {
  const Problem base = make_decode_problem(params(8, 2, 64, 16), {40, 100}, gen(1));
  // Too short: drop columns so that 100 keys (7 blocks) no longer fit.
  Problem t = base;
  t.max_blocks_per_seq = 5;
  t.block_tables.assign(std::size_t(t.batch) * 5, 0);
  expect_input_error([&] { t.validate(); }, {"sequence 1", "5 entries", "100 keys", "needs 7"},
                     "short table");
  // A used entry outside the cache, high and negative.
  t = base;
  t.block_tables[std::size_t(1) * t.max_blocks_per_seq + 6] = t.num_blocks;
  expect_input_error([&] { t.validate(); },
                     {"block_tables[1][6] = " + std::to_string(base.num_blocks),
                      std::to_string(base.num_blocks) + " blocks"},
                     "block id too high");
  t = base;
  t.block_tables[2] = -1;
  expect_input_error([&] { t.validate(); }, {"block_tables[0][2] = -1"}, "negative block id");
  // A length near INT_MAX must not wrap the block count around to a negative number.
  t = base;
  t.context_lens[0] = 2147483647;
  expect_input_error([&] { t.validate(); }, {"sequence 0", "2147483647 keys", "needs 134217728"},
                     "huge context");
  // A table whose size does not match batch x columns.
  t = base;
  t.block_tables.pop_back();
  expect_input_error([&] { t.validate(); }, {"block_tables holds", "batch 2"}, "table size");
}

TEST(Validate, DtypeAndShapeMismatchesAreNamed) {
  const Problem base = make_decode_problem(params(8, 2, 64, 16, DType::f16), {40}, gen(1));
  Problem t = base;
  t.query = HostTensor(DType::f32, base.query.shape);
  expect_input_error([&] { t.validate(); }, {"query is fp32", "problem is fp16"}, "query dtype");
  t = base;
  t.value_cache = HostTensor(DType::bf16, base.value_cache.shape);
  expect_input_error([&] { t.validate(); }, {"value_cache is bf16"}, "value dtype");
  t = base;
  t.key_cache = HostTensor(DType::f16, {base.num_blocks, 2, 16, 32});
  expect_input_error([&] { t.validate(); },
                     {"key_cache has shape [" + std::to_string(base.num_blocks) + ", 2, 16, 32]",
                      "expected [" + std::to_string(base.num_blocks) + ", 2, 16, 64]"},
                     "key shape");
  t = base;
  t.query = HostTensor(DType::f16, {2, 8, 64});
  expect_input_error([&] { t.validate(); }, {"query has shape [2, 8, 64]", "expected [1, 8, 64]"},
                     "query rows");
  t = base;
  t.value_cache.data.resize(t.value_cache.data.size() - 2);
  expect_input_error([&] { t.validate(); }, {"value_cache holds"}, "value bytes");
  t = base;
  t.batch = 0;
  expect_input_error([&] { t.validate(); }, {"batch 0"}, "batch 0");
}

// ---------------------------------------------------------------------------------------------
// Counts.

TEST(Counts, DecodeBytesAndPairsByHand) {
  // fp16, 2 kv heads of 8 dims: one key + one value = 2 * 2 * 8 * 2 bytes = 64 bytes/position.
  AttnParams p = params(4, 2, 8, 16, DType::f16);
  const Problem d = make_decode_problem(p, {5, 17, 0}, gen(1));
  EXPECT_EQ(d.kv_bytes_touched(), (5 + 17) * 64);
  EXPECT_EQ(d.visible_pairs(), (5 + 17) * 4);
  // Causal with window_left 3: the last 4 keys (or fewer).
  p.window_left = 3;
  const Problem w = make_decode_problem(p, {5, 17, 2}, gen(1));
  EXPECT_EQ(w.kv_bytes_touched(), (4 + 4 + 2) * 64);
  EXPECT_EQ(w.visible_pairs(), (4 + 4 + 2) * 4);
  // fp32 doubles the bytes, not the pairs.
  p = params(4, 2, 8, 16, DType::f32);
  const Problem f32 = make_decode_problem(p, {5, 17}, gen(1));
  EXPECT_EQ(f32.kv_bytes_touched(), 22 * 128);
  EXPECT_EQ(f32.visible_pairs(), 22 * 4);
}

TEST(Counts, PrefillBytesAndPairsByHand) {
  const int64_t per_key = 2 * 2 * 8 * 2; // k + v, 2 kv heads, 8 dims, fp16
  AttnParams p = params(4, 2, 8, 16, DType::f16);
  // q 3 over k 5, causal: rows at positions 2, 3, 4 see 3 + 4 + 5 = 12 keys; all 5 are read.
  Problem a = make_prefill_problem(p, {3}, {5}, gen(1));
  EXPECT_EQ(a.visible_pairs(), 12 * 4);
  EXPECT_EQ(a.kv_bytes_touched(), 5 * per_key);
  // q 4 over k 2, causal: positions -2, -1, 0, 1 see 0 + 0 + 1 + 2 = 3 keys.
  Problem b = make_prefill_problem(p, {4}, {2}, gen(1));
  EXPECT_EQ(b.visible_pairs(), 3 * 4);
  EXPECT_EQ(b.kv_bytes_touched(), 2 * per_key);
  // Causal window_left 1, q 3 over k 5: {1,2}, {2,3}, {3,4}: 6 pairs over keys 1..4.
  p.window_left = 1;
  Problem c = make_prefill_problem(p, {3}, {5}, gen(1));
  EXPECT_EQ(c.visible_pairs(), 6 * 4);
  EXPECT_EQ(c.kv_bytes_touched(), 4 * per_key);
  // Not causal, no window: every row sees every key.
  p = params(4, 2, 8, 16, DType::f16);
  p.causal = false;
  Problem e = make_prefill_problem(p, {3, 2}, {5, 0}, gen(1));
  EXPECT_EQ(e.visible_pairs(), 15 * 4);
  EXPECT_EQ(e.kv_bytes_touched(), 5 * per_key);
  // Not causal, window_right 0, q 4 over k 2: same as causal.
  p.window_right = 0;
  Problem f = make_prefill_problem(p, {4}, {2}, gen(1));
  EXPECT_EQ(f.visible_pairs(), 3 * 4);
  // Two sequences add up; a sequence without rows reads nothing.
  p = params(4, 2, 8, 16, DType::f16);
  Problem g = make_prefill_problem(p, {3, 0, 4}, {5, 9, 2}, gen(1));
  EXPECT_EQ(g.visible_pairs(), (12 + 3) * 4);
  EXPECT_EQ(g.kv_bytes_touched(), (5 + 2) * per_key);
}

TEST(Counts, VisiblePairsMatchTheReferenceMask) {
  // visible_pairs uses its own range arithmetic; cross-check it against the mask predicate.
  for (int causal = 0; causal < 2; ++causal) {
    for (int wl : {-1, 0, 2, 40}) {
      for (int wr : {-1, 0, 3}) {
        AttnParams p = params(2, 1, 8, 4, DType::f32);
        p.causal = causal;
        p.window_left = wl;
        p.window_right = wr;
        const std::vector<int> q = {1, 5, 9, 0, 7};
        const std::vector<int> k = {9, 5, 3, 4, 30};
        const Problem pr = make_prefill_problem(p, q, k, gen(1));
        int64_t pairs = 0;
        int64_t keys = 0;
        for (std::size_t b = 0; b < q.size(); ++b) {
          std::set<int> touched;
          for (int i = 0; i < q[b]; ++i) {
            for (int j = 0; j < k[b]; ++j) {
              if (reference_visible(p, q[b], k[b], i, j)) {
                ++pairs;
                touched.insert(j);
              }
            }
          }
          keys += int64_t(touched.size());
        }
        const std::string ctx = "causal=" + std::to_string(causal) + " wl=" + std::to_string(wl) +
                                " wr=" + std::to_string(wr);
        EXPECT_EQ(pr.visible_pairs(), pairs * 2) << ctx;
        EXPECT_EQ(pr.kv_bytes_touched(), keys * 2 * 1 * 8 * 4) << ctx;
      }
    }
  }
}

} // namespace

// negate_elements flips each element's sign bit (its top byte, little-endian) and nothing else,
// for every element size and for lengths that end inside the word-at-a-time loop's last word.
TEST(NegateElements, FlipsTheTopBitOfEachElementOnly) {
  for (std::size_t element : {1u, 2u, 4u}) {
    for (std::size_t n : {0u, 1u, 3u, 7u, 8u, 9u, 31u, 64u, 67u}) {
      const std::size_t bytes = n * element;
      std::vector<std::byte> data(bytes);
      for (std::size_t i = 0; i < bytes; ++i) {
        data[i] = std::byte(uint8_t(i * 37 + 11));
      }
      std::vector<std::byte> want = data;
      for (std::size_t i = element - 1; i < bytes; i += element) {
        want[i] ^= std::byte{0x80};
      }
      negate_elements(data.data(), bytes, element);
      EXPECT_EQ(data, want) << element << "-byte elements, " << n << " of them";
      negate_elements(data.data(), bytes, element);
      for (std::size_t i = 0; i < bytes; ++i) {
        ASSERT_EQ(data[i], std::byte(uint8_t(i * 37 + 11))) << "twice is the identity";
      }
    }
  }
}

// rescale_inputs: over an fp8 cache with both scales, the query halved and the scales doubled,
// which doubles the reference's output and keeps its lse; back undoes it; without both scales
// (or fp8) nothing changes.
TEST(RescaleInputs, DoublesTheOutputAndKeepsTheLse) {
  AttnParams p = params(8, 2, 64, 16, DType::f32);
  p.kv_dtype = DType::fp8_e4m3;
  GenOptions o = gen(5);
  o.k_scale = {0.5f, 4.0f};
  o.v_scale = {0.25f};
  const Problem first = make_decode_problem(p, {1, 40, 17}, o);
  Problem pr = first;
  ASSERT_TRUE(rescale_inputs(pr, false));
  EXPECT_EQ(pr.k_scale, (std::vector<float>{1.0f, 8.0f}));
  EXPECT_EQ(pr.v_scale, (std::vector<float>{0.5f}));
  const ReferenceResult a = reference_attention(first, {});
  const ReferenceResult b = reference_attention(pr, {});
  ASSERT_EQ(a.out.size(), b.out.size());
  for (std::size_t i = 0; i < a.out.size(); ++i) {
    ASSERT_NEAR(b.out[i], 2.0 * a.out[i], 1e-12 * (1.0 + std::abs(a.out[i]))) << i;
  }
  for (std::size_t i = 0; i < a.lse.size(); ++i) {
    ASSERT_NEAR(b.lse[i], a.lse[i], 1e-12) << i;
  }
  ASSERT_TRUE(rescale_inputs(pr, true));
  EXPECT_EQ(pr.query.data, first.query.data) << "fp32: halving and doubling are exact";
  EXPECT_EQ(pr.k_scale, first.k_scale);
  EXPECT_EQ(pr.v_scale, first.v_scale);

  Problem no_v = first;
  no_v.v_scale.clear();
  EXPECT_FALSE(rescale_inputs(no_v, false));
  EXPECT_EQ(no_v.query.data, first.query.data);
  EXPECT_EQ(no_v.k_scale, first.k_scale);
  Problem plain = make_decode_problem(params(8, 2, 64, 16, DType::f32), {1, 40}, gen(5));
  const Problem plain_before = plain;
  EXPECT_FALSE(rescale_inputs(plain, false));
  EXPECT_EQ(plain.query.data, plain_before.query.data);
}
