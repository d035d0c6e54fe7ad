// Tests of sweep profiles: every shipped profile loads, errors name the key path, configuration
// lists cross their values.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "src/model/errors.h"
#include "src/tuning/profile.h"
#include "src/tuning/workloads.h"

namespace attn {
namespace {

using nlohmann::json;

const char* kBase = R"({
  "name": "t",
  "decode": {"batch": [1, 4], "context_len": [64, 256], "num_kv_heads": [2],
             "gqa_ratio": [4], "head_dim": [64], "block_size": [16], "dtype": ["fp16"]}
})";

std::string error_of(const json& j) {
  try {
    (void)parse_profile(j, "profile t");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

json base_with(const std::string& ptr, const json& v) {
  json j = json::parse(kBase);
  j[json::json_pointer(ptr)] = v;
  return j;
}

TEST(Profile, EveryShippedProfileLoadsByNameAndPath) {
  const auto names = builtin_profile_names();
  for (const char* want : {"quick", "default", "qwen2.5-7b", "llama-3-8b", "llama-3-70b-tp8",
                           "mistral-7b", "gemma-2-9b", "phi-3-mini"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  for (const auto& n : names) {
    SCOPED_TRACE(n);
    const Profile p = load_profile(n);
    EXPECT_EQ(p.name, n) << "a profile's name matches its file name";
    EXPECT_EQ(p.hash.size(), 16u);
    const auto ws = expand_workloads(p);
    EXPECT_FALSE(ws.empty());
    int held = 0;
    for (const auto& w : ws) {
      EXPECT_NO_THROW(w.params.validate());
      held += w.held_out ? 1 : 0;
    }
    EXPECT_GE(held, 1) << "every shipped profile has held-out points";
    // The embedded copy is the file in profiles/.
    // A path, not string concatenation: GCC 12 at -O1 warns falsely (-Warray-bounds) on
    // `std::string(...) + "..."` here, depending on what else its unity batch inlines.
    const std::string path =
        (std::filesystem::path(ATTN_SOURCE_DIR) / "profiles" / (n + ".json")).string();
    EXPECT_EQ(load_profile(path).hash, p.hash);
  }
}

TEST(Profile, ModelProfilesHaveTheModelsShapes) {
  struct Want {
    const char* name;
    int heads, kv_heads, head_dim;
  };
  for (const Want& w : {Want{"qwen2.5-7b", 28, 4, 128}, Want{"llama-3-8b", 32, 8, 128},
                        Want{"llama-3-70b-tp8", 8, 1, 128}, Want{"mistral-7b", 32, 8, 128},
                        Want{"gemma-2-9b", 16, 8, 256}, Want{"phi-3-mini", 32, 32, 96}}) {
    for (const auto& wl : expand_workloads(load_profile(w.name))) {
      EXPECT_EQ(wl.params.num_heads, w.heads) << w.name;
      EXPECT_EQ(wl.params.num_kv_heads, w.kv_heads) << w.name;
      EXPECT_EQ(wl.params.head_dim, w.head_dim) << w.name;
    }
  }
  std::set<int> gemma_windows;
  for (const auto& wl : expand_workloads(load_profile("gemma-2-9b"))) {
    gemma_windows.insert(wl.params.window_left);
    EXPECT_EQ(wl.params.softcap, 50.0);
  }
  EXPECT_EQ(gemma_windows, (std::set<int>{-1, 4096}));
  for (const auto& wl : expand_workloads(load_profile("mistral-7b"))) {
    EXPECT_EQ(wl.params.window_left, 4096);
  }
}

// An fp8 KV cache is an axis of its own beside the query dtype (issue 29): "auto" keeps the
// query's dtype, fp8 names (vLLM's included) become the cache dtype, held-out points take the
// grid's first unless they name one, and the workload key and JSON carry it.
TEST(Profile, KvDtypeIsAnAxisBesideTheQueryDtype) {
  json j = base_with("/decode/kv_dtype", {"auto", "fp8", "fp8_e5m2"});
  const Profile p = parse_profile(j, "profile t");
  std::map<std::string, int> seen;
  for (const Workload& w : expand_workloads(p)) {
    if (w.phase != Phase::decode || w.held_out) {
      continue;
    }
    ++seen[w.params.kv_dtype ? std::string(dtype_name(*w.params.kv_dtype)) : "auto"];
    const Workload back = Workload::from_json(w.to_json());
    EXPECT_EQ(back.key(), w.key());
    EXPECT_EQ(back.params.kv_dtype, w.params.kv_dtype);
    EXPECT_EQ(w.key().find(" kv=") != std::string::npos, w.params.kv_dtype.has_value()) << w.key();
  }
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen["auto"], seen["fp8_e4m3"]);
  EXPECT_EQ(seen["auto"], seen["fp8_e5m2"]);
  EXPECT_NE(p.hash, parse_profile(json::parse(kBase), "profile t").hash);

  EXPECT_EQ(error_of(base_with("/decode/kv_dtype", {"fp16"})),
            "profile t: decode.kv_dtype[0]: expected a KV-cache dtype (\"auto\", \"fp8_e4m3\" or "
            "\"fp8_e5m2\"), got \"fp16\"");
  EXPECT_EQ(error_of(base_with("/decode/kv_dtype", {7})),
            "profile t: decode.kv_dtype[0]: expected a KV-cache dtype (\"auto\", \"fp8_e4m3\" or "
            "\"fp8_e5m2\"), got 7");
  // A results line with a cache dtype that is not one is refused at the door.
  json line = expand_workloads(p).front().to_json();
  line["kv_dtype"] = "int4";
  try {
    (void)Workload::from_json(line);
    ADD_FAILURE() << "int4 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("workload.kv_dtype: unknown KV-cache dtype 'int4'"),
              std::string::npos)
        << e.what();
  }
}

TEST(Profile, TheFp8ProfileIsLlama3WithAnE4m3Cache) {
  const Profile fp8 = load_profile("llama-3-8b-fp8");
  const auto ws = expand_workloads(fp8);
  ASSERT_EQ(ws.size(), expand_workloads(load_profile("llama-3-8b")).size());
  for (const Workload& w : ws) {
    ASSERT_TRUE(w.params.kv_dtype.has_value()) << w.key();
    EXPECT_EQ(*w.params.kv_dtype, DType::fp8_e4m3);
    EXPECT_EQ(w.params.dtype, DType::bf16);
    EXPECT_EQ(w.params.num_heads, 32);
    EXPECT_EQ(w.params.num_kv_heads, 8);
  }
}

TEST(Profile, ErrorsNameTheKeyPath) {
  EXPECT_EQ(error_of(base_with("/decode/batch", {1, 2, "x"})),
            "profile t: decode.batch[2]: expected a positive integer, got \"x\"");
  EXPECT_EQ(error_of(base_with("/decode/batch", {1, 0})),
            "profile t: decode.batch[1]: expected a positive integer, got 0");
  EXPECT_NE(error_of(base_with("/decode/bach", {1})).find("profile t: decode.bach: unknown key"),
            std::string::npos);
  EXPECT_NE(error_of(base_with("/colour", 1)).find("profile t: colour: unknown key"),
            std::string::npos);
  EXPECT_EQ(error_of(base_with("/decode/dtype", {"fp8"})),
            "profile t: decode.dtype[0]: expected a dtype (\"fp32\", \"fp16\" or \"bf16\"), got "
            "\"fp8\"");
  EXPECT_EQ(error_of(base_with("/decode/causal", {1})),
            "profile t: decode.causal[0]: expected true or false, got 1");
  EXPECT_EQ(error_of(base_with("/decode/window_left", {-2})),
            "profile t: decode.window_left[0]: expected -1 (unbounded) or a non-negative integer, "
            "got -2");
  // 2^64 - 1 is an unsigned JSON integer that a signed read would take for -1: refused, with the
  // bound it broke.
  EXPECT_EQ(error_of(base_with("/decode/window_left", json::array({json(UINT64_MAX)}))),
            "profile t: decode.window_left[0]: expected -1 (unbounded) or a non-negative integer "
            "(at most 10000000), got 18446744073709551615");
  // A workload's fields are held to the bounds results.jsonl's reader holds its lines to.
  EXPECT_EQ(error_of(base_with("/decode/batch", {65537})),
            "profile t: decode.batch[0]: expected a positive integer (at most 65536), got 65537");
  EXPECT_EQ(error_of(base_with("/decode/batch", json::array())),
            "profile t: decode.batch: expected a non-empty list");
  EXPECT_EQ(error_of(base_with("/timing/warmup", "3")),
            "profile t: timing.warmup: expected a non-negative integer, got \"3\"");
  EXPECT_NE(error_of(base_with("/timing/speed", 3)).find("timing.speed: unknown key"),
            std::string::npos);
  EXPECT_NE(
      error_of(base_with("/configs/decode_v3", "auto")).find("configs.decode_v3: unknown key"),
      std::string::npos);
  EXPECT_EQ(error_of(base_with("/configs/decode_v2", json::array({{{"partition", "big"}}}))),
            "profile t: configs.decode_v2[0].partition: expected a non-negative integer, got "
            "\"big\"");
  EXPECT_EQ(error_of(base_with("/configs/prefill", "fast")),
            "profile t: configs.prefill: expected \"auto\" or a list of configurations, got "
            "\"fast\"");
  EXPECT_EQ(error_of(base_with("/held_out", json::array({{{"context_len", 1.5}}}))),
            "profile t: held_out[0].context_len: expected a positive integer, got 1.5");
  // A held-out point and a window are held to the same bounds as the grid's values (its own
  // sweep's results reader would refuse the lines otherwise).
  EXPECT_EQ(error_of(base_with("/held_out", json::array({{{"batch", 70000}}}))),
            "profile t: held_out[0].batch: expected a positive integer (at most 65536), got 70000");
  EXPECT_EQ(error_of(base_with("/held_out", json::array({{{"num_kv_heads", 5000}}}))),
            "profile t: held_out[0].num_kv_heads: expected a positive integer (at most 4096), got "
            "5000");
  json twice = json::parse(kBase);
  twice["decode"]["context_lens"] = {{30, 40}, {30, 40}};
  EXPECT_EQ(error_of(twice), "profile t: decode.context_lens[1]: the same batch as "
                             "decode.context_lens[0] (a batch is listed once)");
  json no_pairs = json::parse(kBase);
  no_pairs["prefill"] = {{"batch", {1}},        {"q_len", {512}},   {"k_len", {128, 256}},
                         {"num_kv_heads", {2}}, {"gqa_ratio", {4}}, {"head_dim", {64}},
                         {"block_size", {16}},  {"dtype", {"fp16"}}};
  EXPECT_EQ(error_of(no_pairs), "profile t: prefill.q_len: every q_len is longer than every "
                                "k_len: the grid keeps the pairs with q_len <= k_len, and none "
                                "is left");
  EXPECT_EQ(error_of(base_with("/decode/window_left", {10000001})),
            "profile t: decode.window_left[0]: expected -1 (unbounded) or a non-negative integer "
            "(at most 10000000), got 10000001");
  EXPECT_NE(error_of(base_with("/held_out", json::array({{{"q_len", 4}}})))
                .find("held_out[0].q_len: unknown key"),
            std::string::npos);
  EXPECT_EQ(error_of(base_with("/decode/num_heads", {8})),
            "profile t: decode: give exactly one of gqa_ratio and num_heads");
  json no_ctx = json::parse(kBase);
  no_ctx["decode"].erase("context_len");
  EXPECT_EQ(error_of(no_ctx), "profile t: decode.context_len: missing (give context_len, context_lens or length_mix)");
  json odd = json::parse(kBase);
  odd["decode"].erase("gqa_ratio");
  odd["decode"]["num_heads"] = {3};
  EXPECT_EQ(error_of(odd), "profile t: decode.num_heads: 3 is not a multiple of num_kv_heads 2");
  EXPECT_EQ(error_of(base_with("/decode/head_dim", {20})),
            "profile t: decode.head_dim[0]: 20 is not a multiple of 8");
  // A grid value is named where it is, not through a held-out point that inherits it.
  json ho = base_with("/decode/head_dim", {64, 20});
  ho["held_out"] = json::array({{{"batch", 3}}});
  EXPECT_EQ(error_of(ho), "profile t: decode.head_dim[1]: 20 is not a multiple of 8");
  EXPECT_EQ(
      error_of(base_with("/decode/block_size", {2048})),
      "profile t: decode.block_size[0]: expected a positive integer (at most 1024), got 2048");
  // An axis lists each value once; a held-out point is listed once.
  EXPECT_EQ(error_of(base_with("/decode/batch", {1, 4, 1})),
            "profile t: decode.batch[2]: 1 is listed twice (an axis lists each value once)");
  EXPECT_EQ(error_of(base_with("/decode/dtype", {"fp16", "half"})),
            "profile t: decode.dtype[1]: \"half\" is listed twice (an axis lists each value once)");
  EXPECT_EQ(error_of(base_with("/configs/decode_v2",
                               json::array({{{"partition", json::array({256, 256})}}}))),
            "profile t: configs.decode_v2[0].partition[1]: 256 is listed twice (an axis lists "
            "each value once)");
  EXPECT_EQ(error_of(base_with("/held_out", json::array({{{"batch", 3}}, {{"batch", 3}}}))),
            "profile t: held_out[1]: the same workload as held_out[0]");
  EXPECT_EQ(error_of(json::array()), "profile t: (top level): expected an object, got []");
  json no_grid = json::parse(kBase);
  no_grid.erase("decode");
  EXPECT_NE(error_of(no_grid).find("needs a decode grid, a prefill grid or both"),
            std::string::npos);
}

TEST(Profile, TimingTakesAWarmUpDurationAndAMode) {
  // An old profile (a warm-up count only) still parses; the count becomes a minimum and the
  // duration keeps its default.
  const Profile old = parse_profile(base_with("/timing", {{"warmup", 5}, {"min_reps", 4}}), "t");
  EXPECT_EQ(old.timing.warmup, 5);
  EXPECT_DOUBLE_EQ(old.timing.warmup_seconds, TimingOptions{}.warmup_seconds);
  EXPECT_GT(TimingOptions{}.warmup_seconds, 0.01) << "tens of milliseconds by default";
  EXPECT_EQ(old.timing.mode, TimingMode::events);
  const Profile p = parse_profile(
      base_with("/timing", {{"warmup", 0}, {"warmup_seconds", 0.02}, {"mode", "graph"}}), "t");
  EXPECT_EQ(p.timing.warmup, 0);
  EXPECT_DOUBLE_EQ(p.timing.warmup_seconds, 0.02);
  EXPECT_EQ(p.timing.mode, TimingMode::graph);
  EXPECT_EQ(parse_profile(base_with("/timing/mode", "events"), "t").timing.mode,
            TimingMode::events);
  EXPECT_EQ(error_of(base_with("/timing/warmup_seconds", -0.1)),
            "profile t: timing.warmup_seconds: expected seconds >= 0, got -0.1");
  EXPECT_EQ(error_of(base_with("/timing/mode", "cupti")),
            "profile t: timing.mode: expected \"events\" or \"graph\", got \"cupti\"");
  EXPECT_EQ(error_of(base_with("/timing/mode", 1)),
            "profile t: timing.mode: expected \"events\" or \"graph\", got 1");
}

TEST(Profile, LoadErrorsNameTheFileOrListTheNames) {
  try {
    (void)load_profile("no-such-profile");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown profile 'no-such-profile' (built in: default,"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)load_profile("/nonexistent/p.json"), InputError);
  const auto dir = std::filesystem::temp_directory_path();
  const auto f = dir / ("attn_bad_profile_" + std::to_string(::getpid()) + ".json");
  std::ofstream(f) << "{\"name\": \"bad\", \"decode\": {";
  try {
    (void)load_profile(f.string());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("profile " + f.string() + ": not valid JSON"),
              std::string::npos)
        << e.what();
  }
  // A key given twice: JSON would keep the last one silently.
  std::ofstream(f) << R"({"name": "bad", "decode": {"batch": [1], "batch": [2], "context_len": 64,
      "num_kv_heads": 1, "gqa_ratio": 2, "head_dim": 32, "block_size": 16, "dtype": "fp32"}})";
  try {
    (void)load_profile(f.string());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "profile " + f.string() +
                                         ": decode.batch: the key appears twice in its object "
                                         "(JSON keeps only the last; give it once)");
  }
  std::filesystem::remove(f);
}

TEST(Profile, ConfigListsCrossTheirValues) {
  json j = json::parse(kBase);
  j["configs"] = {{"decode_v2",
                   {{{"partition", {256, 512}}, {"split", {0, 1}}},
                    {{"partition", 256}, {"split", 0}}}}}; // duplicate dropped
  const Profile p = parse_profile(j, "profile t");
  ASSERT_EQ(p.configs.at(Family::decode_v2).size(), 4u);
  EXPECT_EQ(p.configs.at(Family::decode_v2)[0].key(), "decode_v2[partition=256,split=0]");
  EXPECT_EQ(p.configs.at(Family::decode_v2)[3].key(), "decode_v2[partition=512,split=1]");
  EXPECT_FALSE(p.configs.count(Family::decode_v1)) << "unlisted families are auto";
  // The hash follows the content.
  EXPECT_NE(p.hash, parse_profile(json::parse(kBase), "profile t").hash);
}

// The million-workload limit counts the batches a length mix draws (each of them a workload at
// each batch size), not the grid's lengths alone: such a profile is refused up front, not left
// to plan for minutes.
TEST(Profile, TheGridLimitCountsLengthMixBatches) {
  json j = {
      {"name", "mix"},
      {"decode",
       {{"batch", json::array()},
        {"context_len", {64}},
        {"num_kv_heads", 1},
        {"gqa_ratio", 2},
        {"head_dim", 64},
        {"block_size", 16},
        {"dtype", "fp16"},
        {"length_mix", {{{"dist", "uniform"}, {"min", 1}, {"max", 100}, {"batches", 1001}}}}}}};
  for (int b = 1; b <= 1000; ++b) {
    j["decode"]["batch"].push_back(b);
  }
  const Profile p = parse_profile(j, "profile mix");
  try {
    (void)expand_workloads(p);
    FAIL() << "a grid of a million and more workloads was expanded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("its decode grid crosses to 1002000 workloads"),
              std::string::npos)
        << e.what();
  }
}

} // namespace
} // namespace attn
