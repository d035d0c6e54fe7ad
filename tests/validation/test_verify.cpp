// verify's case groups: they cover SPEC.md's edges, and their seeds depend only on the run seed,
// the group and the index.
#include <gtest/gtest.h>

#include <algorithm>
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

namespace {

// Every length of the decode cases of one group.
std::set<int> decode_lengths(const std::vector<VerifyCase>& cases, const std::string& group) {
  std::set<int> lens;
  for (const auto& c : cases) {
    if (c.group == group) {
      lens.insert(c.k_lens.begin(), c.k_lens.end());
    }
  }
  return lens;
}

} // namespace

// A kernel set that declares partitions 384 and 768 and accepts block sizes 16 and 48 gets their
// boundaries and its unusual block size at every intensity.
TEST(VerifyCases, AimAtDeclaredPartitionsAndBlockSizesAtEveryIntensity) {
  KernelTargets aim;
  aim.partitions = {384, 768};
  aim.block_sizes = {16, 48};
  aim.head_dims = {64, 128};
  for (Intensity in : {Intensity::quick, Intensity::standard, Intensity::full}) {
    const auto cases = verify_cases(Phase::decode, DType::f32, in, 3, aim);
    // The edge batches reach the first boundary of each partition; with the partition batches,
    // every k*P-1, k*P, k*P+1 for k = 1, 2 is checked.
    const std::set<int> edges = decode_lengths(cases, "decode/edges/fp32");
    std::set<int> covered = decode_lengths(cases, "decode/partition/fp32");
    covered.insert(edges.begin(), edges.end());
    for (int p : aim.partitions) {
      for (int d : {-1, 0, 1}) {
        EXPECT_TRUE(edges.count(p + d)) << "edges miss " << p + d;
        for (int k : {1, 2}) {
          EXPECT_TRUE(covered.count(k * p + d)) << "nothing checks " << k * p + d;
        }
      }
    }
    // One ragged batch per partition, shuffled, with a block size that divides the partition.
    int partition_cases = 0;
    for (const auto& c : cases) {
      if (c.group == "decode/partition/fp32") {
        ++partition_cases;
        EXPECT_FALSE(std::is_sorted(c.k_lens.begin(), c.k_lens.end()));
        const int p = (*std::max_element(c.k_lens.begin(), c.k_lens.end()) - 1) / 2; // 2P+1
        EXPECT_TRUE(p == 384 || p == 768) << p;
        EXPECT_EQ(p % c.params.block_size, 0);
        for (int d : {-1, 0, 1}) {
          EXPECT_NE(std::find(c.k_lens.begin(), c.k_lens.end(), 2 * p + d), c.k_lens.end());
        }
      }
    }
    EXPECT_EQ(partition_cases, 2);
    // Block size 48 and its block boundary (96, 97) are in the edge cases; 8 and 32 are not.
    std::set<int> blocks;
    for (const auto& c : cases) {
      blocks.insert(c.params.block_size);
      if (c.group == "decode/edges/fp32" && c.params.block_size == 48) {
        EXPECT_NE(std::find(c.k_lens.begin(), c.k_lens.end(), 96), c.k_lens.end());
        EXPECT_NE(std::find(c.k_lens.begin(), c.k_lens.end(), 97), c.k_lens.end());
      }
    }
    EXPECT_TRUE(blocks.count(48));
    EXPECT_FALSE(blocks.count(8) || blocks.count(32));
  }
}

// A decode_v2 that declares no partition chooses its splits: there are no partition boundaries
// to aim at, so no partition group and no made-up 256/512/1024 boundaries; block boundaries, an
// empty context and the long contexts are still checked.
TEST(VerifyCases, AKernelThatChoosesItsSplitsGetsBlockEdgesAndLongContexts) {
  KernelTargets aim;
  aim.kernel_splits = true;
  aim.block_sizes = {16, 48};
  aim.head_dims = {64, 128};
  for (Intensity in : {Intensity::quick, Intensity::standard, Intensity::full}) {
    const auto cases = verify_cases(Phase::decode, DType::f32, in, 3, aim);
    EXPECT_TRUE(decode_lengths(cases, "decode/partition/fp32").empty());
    const std::set<int> edges = decode_lengths(cases, "decode/edges/fp32");
    for (int len : {0, 1, 15, 16, 17, 32, 33, 47, 48, 49, 96, 97}) {
      EXPECT_TRUE(edges.count(len)) << "edges miss " << len;
    }
    for (int p : {256, 512, 1024}) {
      EXPECT_FALSE(edges.count(p + 1)) << "a partition boundary nobody declared: " << p + 1;
    }
    const std::set<int> long_lens = decode_lengths(cases, "decode/long/fp32");
    ASSERT_FALSE(long_lens.empty());
    EXPECT_GT(*long_lens.rbegin(), 2048);
  }
  // Without a declaration at all (a set with no decode_v2) the usual boundaries stay.
  const auto plain = verify_cases(Phase::decode, DType::f32, Intensity::quick, 3);
  EXPECT_FALSE(decode_lengths(plain, "decode/partition/fp32").empty());
}

// Where the set accepts no block size of the usual groups (vLLM CPU's vec path wants multiples
// of 32), those groups use the smallest it accepts.
TEST(VerifyCases, GroupsUseABlockSizeTheSetAccepts) {
  KernelTargets aim;
  aim.block_sizes = {32, 64, 128};
  aim.head_dims = {128};
  for (Phase ph : {Phase::decode, Phase::prefill}) {
    for (const auto& c : verify_cases(ph, DType::bf16, Intensity::quick, 1, aim)) {
      EXPECT_TRUE(c.params.block_size == 32 || c.params.block_size == 64 ||
                  c.params.block_size == 128)
          << c.name() << " bs=" << c.params.block_size;
      EXPECT_EQ(c.params.head_dim, 128) << c.name();
    }
  }
}

// Declared prefill tiles put query and key lengths around them.
TEST(VerifyCases, PrefillAimsAtDeclaredTiles) {
  KernelTargets aim;
  aim.q_tiles = {48};
  aim.k_tiles = {80};
  std::set<int> q;
  std::set<int> k;
  for (const auto& c : verify_cases(Phase::prefill, DType::f16, Intensity::quick, 1, aim)) {
    if (c.group == "prefill/tiles/fp16") {
      q.insert(c.q_lens.begin(), c.q_lens.end());
      k.insert(c.k_lens.begin(), c.k_lens.end());
      for (std::size_t b = 0; b < c.q_lens.size(); ++b) {
        EXPECT_LE(c.q_lens[b], c.k_lens[b]);
      }
    }
  }
  for (int v : {47, 48, 49, 95, 96, 97}) {
    EXPECT_TRUE(q.count(v)) << "query length " << v;
  }
  for (int v : {79, 80, 81, 159, 160, 161}) {
    EXPECT_TRUE(k.count(v)) << "key length " << v;
  }
}
