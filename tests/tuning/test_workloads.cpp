// Grid expansion: a profile's workloads come out in a stable order, held-out points last (a
// held-out point that is also a grid point stays a grid point), and workloads round-trip through
// JSON.
#include <gtest/gtest.h>

#include "src/tuning/profile.h"
#include "src/tuning/workloads.h"

namespace attn {
namespace {

using nlohmann::json;

const char* kProfileText = R"({
  "name": "t",
  "decode": {"batch": [1, 4], "context_len": [64, 256], "num_kv_heads": [2],
             "gqa_ratio": [4], "head_dim": [64], "block_size": [16], "dtype": ["fp16"]}
})";

TEST(Workloads, ExpandsTheGridInAStableOrder) {
  json j = json::parse(kProfileText);
  j["decode"]["window_left"] = {-1, 128};
  j["prefill"] = {{"batch", 2},        {"q_len", {16, 64}}, {"k_len", {32, 64}},
                  {"num_kv_heads", 1}, {"num_heads", 4},    {"head_dim", 32},
                  {"block_size", 16},  {"dtype", "bf16"},   {"causal", {true, false}}};
  j["held_out"] = {{{"batch", 2}, {"context_len", 100}},
                   {{"batch", 4}, {"context_len", 64}}, // a grid point: not held out
                   {{"phase", "prefill"}, {"q_len", 8}, {"k_len", 8}}};
  const Profile p = parse_profile(j, "profile t");
  const auto ws = expand_workloads(p);
  // decode 2 batch x 2 ctx x 2 windows; prefill (16,32) (16,64) (64,64) x 2 causal; 2 held out.
  ASSERT_EQ(ws.size(), 8u + 6u + 2u);
  EXPECT_EQ(ws[0].key(), "decode b=1 ctx=64 h=8 kvh=2 d=64 bs=16 fp16 causal wl=-1 wr=-1 cap=0");
  EXPECT_EQ(ws[1].key(), "decode b=1 ctx=256 h=8 kvh=2 d=64 bs=16 fp16 causal wl=-1 wr=-1 cap=0");
  EXPECT_EQ(ws[4].params.window_left, 128);
  EXPECT_EQ(ws[8].phase, Phase::prefill);
  EXPECT_EQ(ws[8].params.num_heads, 4);
  EXPECT_EQ(ws[8].params.dtype, DType::bf16);
  for (std::size_t i = 0; i < 14; ++i) {
    EXPECT_FALSE(ws[i].held_out);
  }
  EXPECT_TRUE(ws[14].held_out);
  EXPECT_EQ(ws[14].context_len, 100);
  EXPECT_EQ(ws[14].params.num_heads, 8) << "missing held-out fields take the axis' first value";
  EXPECT_TRUE(ws[15].held_out);
  EXPECT_EQ(ws[15].phase, Phase::prefill);
  EXPECT_EQ(ws[15].q_len, 8);
  // The JSON form round-trips.
  for (const auto& w : ws) {
    EXPECT_EQ(Workload::from_json(w.to_json()).key(), w.key());
  }
}

} // namespace
} // namespace attn
