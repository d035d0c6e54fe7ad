// verify's case groups: they cover SPEC.md's edges, and their seeds depend only on the run seed,
// the group and the index.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "src/validation/verify.h"

using namespace attn;

TEST(VerifyCases, DecodeEdgesHitSpecLengths) {
  const auto cases = verify_cases(Phase::decode, DType::f16, Intensity::quick, 7);
  std::set<int> lens;
  std::set<std::string> groups;
  bool mqa = false;
  bool shared = false;
  for (const auto& c : cases) {
    groups.insert(c.group);
    if (c.group == "decode/edges/fp16") {
      lens.insert(c.k_lens.begin(), c.k_lens.end());
    }
    mqa |= c.params.num_kv_heads == 1 && c.params.num_heads > 1;
    shared |= c.shared_prefix;
  }
  for (int want : {0, 1, 15, 16, 17, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025}) {
    EXPECT_TRUE(lens.count(want)) << "decode edges miss context length " << want;
  }
  EXPECT_TRUE(mqa);
  EXPECT_TRUE(shared);
  EXPECT_TRUE(groups.count("decode/masks/fp16"));
  EXPECT_TRUE(groups.count("decode/long/fp16"));
}

TEST(VerifyCases, PrefillCoversChunkedAndEmptyRows) {
  const auto cases = verify_cases(Phase::prefill, DType::bf16, Intensity::quick, 7);
  bool chunked = false;
  bool q_gt_k = false;
  bool window_right = false;
  bool softcap = false;
  bool non_causal = false;
  for (const auto& c : cases) {
    for (std::size_t b = 0; b < c.q_lens.size(); ++b) {
      chunked |= c.q_lens[b] < c.k_lens[b];
      q_gt_k |= c.q_lens[b] > c.k_lens[b];
    }
    window_right |= c.params.window_right >= 0;
    softcap |= c.params.softcap > 0;
    non_causal |= !c.params.causal;
  }
  EXPECT_TRUE(chunked && q_gt_k && window_right && softcap && non_causal);
}

TEST(VerifyCases, SeedsDependOnlyOnRunSeedGroupAndIndex) {
  const auto a = verify_cases(Phase::decode, DType::f32, Intensity::quick, 42);
  const auto b = verify_cases(Phase::decode, DType::f32, Intensity::quick, 42);
  const auto c = verify_cases(Phase::decode, DType::f32, Intensity::quick, 43);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].seed, b[i].seed);
    EXPECT_EQ(a[i].name(), b[i].name());
    EXPECT_NE(a[i].seed, c[i].seed);
  }
}
