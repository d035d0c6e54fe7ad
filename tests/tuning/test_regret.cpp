// Tests of the reference rules (vLLM's and the seed engine's, as SPEC.md states them) and of the
// regret charged when a chosen partition or configuration was not measured.
#include <gtest/gtest.h>

#include <cstddef>

#include "src/tuning/regret.h"

namespace attn {
namespace {

TEST(ReferenceRules, FollowSpecMd) {
  DecodePoint p;
  p.num_heads = 32;
  p.num_kv_heads = 8;
  // vLLM: v1 when ctx <= 8192 and (one partition or num_seqs * num_heads > 512).
  p.batch = 1;
  p.context_len = 512;
  EXPECT_FALSE(vllm_rule(p).v2);
  p.context_len = 513;
  EXPECT_TRUE(vllm_rule(p).v2);
  p.batch = 17; // 17 * 32 = 544 > 512
  EXPECT_FALSE(vllm_rule(p).v2);
  p.context_len = 8193;
  EXPECT_TRUE(vllm_rule(p).v2);
  EXPECT_EQ(vllm_rule(p).partition, 512);
  // Seed engine: v2 when num_kv_heads * ceil(ctx / 512) > 32.
  p.context_len = 4 * 512; // 8 * 4 = 32: not above
  EXPECT_FALSE(seed_engine_rule(p).v2);
  p.context_len = 4 * 512 + 1; // 8 * 5 = 40
  EXPECT_TRUE(seed_engine_rule(p).v2);
}

TEST(Regret, ChargesMissingPartitionsTheNearestMeasuredOne) {
  DecodePoint p;
  p.context_len = 4096;
  p.v1_s = 2.0;
  p.v2_by_partition = {{256, 1.0}, {1024, 3.0}};
  p.best_s = 1.0;
  EXPECT_EQ(p.v2_time(512), 1.0); // 256 and 1024 are equally far in log2: the smaller wins
  EXPECT_EQ(p.v2_time(2048), 3.0);
  const Regret r = regret_of({p}, seed_engine_rule); // kvh 1 * 8 partitions: not > 32 -> v1
  EXPECT_DOUBLE_EQ(r.mean, 1.0);
  const Regret rc = regret_of_configs({p}, [](std::size_t) {
    return KernelConfig{Family::decode_v2, {{"partition", 1024}}};
  });
  EXPECT_DOUBLE_EQ(rc.worst, 2.0);
}

TEST(Regret, CountsPointsBeyondTheirMeasuredNoise) {
  DecodePoint p;
  p.context_len = 512;
  p.v1_s = 1.25;
  p.v2_by_partition = {{512, 1.0}};
  p.best_s = 1.0;
  p.noise = 0.25; // v1 is 25% slower: exactly at the noise, not beyond it
  const Rule always_v1 = [](const DecodePoint&) { return RuleChoice{false, 512}; };
  Regret r = regret_of({p}, always_v1);
  EXPECT_DOUBLE_EQ(r.worst, 0.25);
  EXPECT_EQ(r.beyond_noise, 0);
  p.noise = 0.125;
  r = regret_of({p}, always_v1);
  EXPECT_EQ(r.beyond_noise, 1);
  EXPECT_EQ(r.to_json()["beyond_noise"], 1);
  r = regret_of_configs({p}, [](std::size_t) { return KernelConfig{Family::decode_v1, {}}; });
  EXPECT_EQ(r.beyond_noise, 1);
  EXPECT_EQ(regret_of({p},
                      [](const DecodePoint&) {
                        return RuleChoice{true, 512};
                      })
                .beyond_noise,
            0);
}

} // namespace
} // namespace attn
