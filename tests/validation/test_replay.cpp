// Tests of replay files: generated problems survive save and load bit for bit, metadata takes
// SPEC.md's defaults and refuses malformed values by key, and outputs round correctly.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "reference/reference.h"
#include "src/io/safetensors.h"
#include "src/model/errors.h"
#include "src/model/problem_gen.h"
#include "src/validation/check.h"
#include "src/validation/replay.h"

using namespace attn;
namespace fs = std::filesystem;

namespace {

fs::path temp_file(const std::string& name) {
  return fs::temp_directory_path() /
         ("attn_replay_" + std::to_string(std::random_device{}()) + "_" + name);
}

AttnParams decode_params() {
  AttnParams p;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 32;
  p.block_size = 16;
  p.dtype = DType::f16;
  p.window_left = 20;
  p.softcap = 12.5;
  p.scale = 0.125;
  return p;
}

AttnParams prefill_params() {
  AttnParams p;
  p.num_heads = 4;
  p.num_kv_heads = 4;
  p.head_dim = 16;
  p.block_size = 8;
  p.dtype = DType::bf16;
  p.causal = false;
  p.window_right = 3;
  return p;
}

void expect_same_problem(const Problem& a, const Problem& b) {
  EXPECT_EQ(a.phase, b.phase);
  EXPECT_EQ(a.params.describe(), b.params.describe());
  EXPECT_EQ(a.params.scale.has_value(), b.params.scale.has_value());
  EXPECT_EQ(a.params.effective_scale(), b.params.effective_scale());
  EXPECT_EQ(a.batch, b.batch);
  EXPECT_EQ(a.num_blocks, b.num_blocks);
  EXPECT_EQ(a.max_blocks_per_seq, b.max_blocks_per_seq);
  EXPECT_EQ(a.block_tables, b.block_tables);
  EXPECT_EQ(a.context_lens, b.context_lens);
  EXPECT_EQ(a.cu_seqlens_q, b.cu_seqlens_q);
  EXPECT_EQ(a.cu_seqlens_k, b.cu_seqlens_k);
  for (auto [x, y] : {std::pair{&a.query, &b.query},
                      {&a.key_cache, &b.key_cache},
                      {&a.value_cache, &b.value_cache}}) {
    EXPECT_EQ(x->dtype, y->dtype);
    EXPECT_EQ(x->shape, y->shape);
    EXPECT_EQ(x->data, y->data);
  }
}

// Expects replay_from_safetensors to refuse `f` with a one-line message holding `needle`.
void expect_refused(const SafetensorsFile& f, const std::string& needle) {
  try {
    (void)replay_from_safetensors(f, "dump.safetensors");
    ADD_FAILURE() << "accepted; expected an error containing: " << needle;
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("dump.safetensors: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

} // namespace

TEST(Replay, DecodeRoundTripsThroughAFile) {
  const Problem pr = make_decode_problem(decode_params(), {1, 15, 16, 17, 0, 40},
                                         {.seed = 5, .shared_prefix = true});
  const ReferenceResult ref = reference_attention(pr, {.threads = 2, .rows = {}});
  const HostTensor out = reference_out_as(ref, pr.params.dtype);
  const std::vector<float> lse = reference_lse_as_float(ref);
  const fs::path path = temp_file("decode.safetensors");
  save_replay(path.string(), pr, &out, &lse);
  const ReplayFile rf = load_replay(path.string());
  fs::remove(path);
  expect_same_problem(pr, rf.problem);
  ASSERT_TRUE(rf.out && rf.lse);
  EXPECT_EQ(rf.out->data, out.data);
  ASSERT_EQ(rf.lse->size(), lse.size());
  for (std::size_t i = 0; i < lse.size(); ++i) {
    EXPECT_TRUE(lse[i] == (*rf.lse)[i] || (std::isinf(lse[i]) && std::isinf((*rf.lse)[i]))) << i;
  }
  // The loaded problem is the same problem: the reference agrees exactly.
  const ReferenceResult again = reference_attention(rf.problem, {.threads = 2, .rows = {}});
  EXPECT_EQ(again.out, ref.out);
}

// An fp8 cache goes out as F8_E4M3 / F8_E5M2 with kv_cache_dtype and its scales (shape [] per
// tensor, [num_kv_heads] per head), in every layout, and comes back the same problem.
TEST(Replay, Fp8CachesAndScalesRoundTrip) {
  for (const DType kv : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    for (const KvLayout layout : {KvLayout::HND, KvLayout::NHD, KvLayout::vllm}) {
      AttnParams p = decode_params();
      p.kv_dtype = kv;
      GenOptions g;
      g.seed = 9;
      g.kv_layout = layout;
      g.k_scale = {0.25f, 3.0f};
      g.v_scale = {1.0f / 64};
      const Problem pr = make_decode_problem(p, {1, 17, 40}, g);
      const SafetensorsFile f = replay_to_safetensors(pr, nullptr, nullptr);
      EXPECT_EQ(f.metadata.at("kv_cache_dtype"), dtype_name(kv));
      EXPECT_EQ(f.tensors.at("key_cache").dtype,
                kv == DType::fp8_e4m3 ? StDType::f8_e4m3 : StDType::f8_e5m2);
      EXPECT_EQ(f.tensors.at("k_scale").shape, (std::vector<int64_t>{p.num_kv_heads}));
      EXPECT_TRUE(f.tensors.at("v_scale").shape.empty());
      const ReplayFile rf =
          replay_from_safetensors(parse_safetensors(serialize_safetensors(f), "x"), "x");
      expect_same_problem(pr, rf.problem);
      EXPECT_EQ(rf.problem.params.kv_dtype, kv);
      EXPECT_EQ(rf.problem.k_scale, g.k_scale);
      EXPECT_EQ(rf.problem.v_scale, g.v_scale);
      EXPECT_EQ(reference_attention(rf.problem, {.threads = 1, .rows = {}}).out,
                reference_attention(pr, {.threads = 1, .rows = {}}).out);
      // The same bytes as U8 with the format named read the same; without it they are refused.
      SafetensorsFile u8 = f;
      u8.tensors.at("key_cache").dtype = StDType::u8;
      u8.tensors.at("value_cache").dtype = StDType::u8;
      expect_same_problem(pr, replay_from_safetensors(u8, "x").problem);
      u8.metadata.erase("kv_cache_dtype");
      expect_refused(u8, "key_cache is U8: an fp8 cache names its format");
    }
  }
}

TEST(Replay, PrefillRoundTripsWithoutAnswer) {
  const Problem pr =
      make_prefill_problem(prefill_params(), {5, 16, 3, 0}, {40, 16, 0, 9}, {.seed = 6});
  const fs::path path = temp_file("prefill.safetensors");
  save_replay(path.string(), pr);
  const ReplayFile rf = load_replay(path.string());
  fs::remove(path);
  expect_same_problem(pr, rf.problem);
  EXPECT_FALSE(rf.out);
  EXPECT_FALSE(rf.lse);
  EXPECT_FALSE(rf.problem.params.scale); // unset stays unset: 1/sqrt(head_dim) on load
  EXPECT_EQ(rf.metadata.at("causal"), "false");
  EXPECT_EQ(rf.metadata.at("window_right"), "3");
}

TEST(Replay, MissingMetadataTakesTheSpecDefaults) {
  AttnParams p = prefill_params();
  SafetensorsFile f =
      replay_to_safetensors(make_prefill_problem(p, {3}, {5}, {}), nullptr, nullptr);
  f.metadata.clear();
  const AttnParams q = replay_from_safetensors(f, "x").problem.params;
  EXPECT_TRUE(q.causal);
  EXPECT_EQ(q.window_left, -1);
  EXPECT_EQ(q.window_right, -1);
  EXPECT_EQ(q.softcap, 0.0);
  EXPECT_FALSE(q.scale);
  EXPECT_DOUBLE_EQ(q.effective_scale(), 0.25); // 1/sqrt(16)
  // Derived from shapes.
  EXPECT_EQ(q.num_heads, 4);
  EXPECT_EQ(q.num_kv_heads, 4);
  EXPECT_EQ(q.head_dim, 16);
  EXPECT_EQ(q.block_size, 8);
  EXPECT_EQ(q.dtype, DType::bf16);
}

TEST(Replay, MetadataSpellingsAndUnknownKeys) {
  SafetensorsFile f =
      replay_to_safetensors(make_decode_problem(decode_params(), {9}, {}), nullptr, nullptr);
  f.metadata = {{"causal", "False"},      {"scale", "0.5"},    {"window_left", "-1"},
                {"window_right", "7"},    {"softcap", "30.0"}, {"format", "pt"},
                {"vllm_version", "0.6.3"}};
  const AttnParams p = replay_from_safetensors(f, "x").problem.params;
  EXPECT_FALSE(p.causal);
  EXPECT_EQ(*p.scale, 0.5);
  EXPECT_EQ(p.window_left, -1);
  EXPECT_EQ(p.window_right, 7);
  EXPECT_EQ(p.softcap, 30.0);
  for (const char* t : {"true", "True", "TRUE", "1"}) {
    f.metadata["causal"] = t;
    EXPECT_TRUE(replay_from_safetensors(f, "x").problem.params.causal) << t;
  }
  f.metadata["causal"] = "0";
  EXPECT_FALSE(replay_from_safetensors(f, "x").problem.params.causal);
  // str(None) of an unset optional argument takes the default; for causal it is no boolean.
  f.metadata = {
      {"scale", "None"}, {"window_left", "None"}, {"window_right", "None"}, {"softcap", "None"}};
  const AttnParams d = replay_from_safetensors(f, "x").problem.params;
  EXPECT_FALSE(d.scale);
  EXPECT_EQ(d.window_left, -1);
  EXPECT_EQ(d.window_right, -1);
  EXPECT_EQ(d.softcap, 0.0);
  f.metadata = {{"causal", "None"}};
  EXPECT_THROW((void)replay_from_safetensors(f, "x"), InputError);
}

TEST(Replay, MalformedMetadataNamesTheKey) {
  const SafetensorsFile base =
      replay_to_safetensors(make_decode_problem(decode_params(), {9}, {}), nullptr, nullptr);
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"causal", "maybe", "causal = 'maybe' is not a boolean"},
      {"causal", "", "causal = '' is not a boolean"},
      {"scale", "abc", "scale = 'abc' is not a finite number"},
      {"scale", "0.5x", "scale = '0.5x'"},
      {"scale", "nan", "scale = 'nan'"},
      {"scale", "-1", "scale -1"}, // parses, then validate() refuses it
      {"softcap", "inf", "softcap = 'inf'"},
      {"softcap", "-2", "softcap -2"},
      {"window_left", "1.5", "window_left = '1.5' is not an integer"},
      {"window_left", "-5", "window_left -5"},
      {"window_right", "99999999999", "window_right = '99999999999'"},
  };
  for (const auto& [key, value, needle] : cases) {
    SafetensorsFile f = base;
    f.metadata[key] = value;
    SCOPED_TRACE(key + "=" + value);
    expect_refused(f, needle);
  }
}

TEST(Replay, InconsistentTensorsAreRefused) {
  const Problem dec = make_decode_problem(decode_params(), {9, 30}, {});
  const SafetensorsFile base = replay_to_safetensors(dec, nullptr, nullptr);
  {
    SafetensorsFile f = base;
    f.tensors.erase("value_cache");
    expect_refused(f, "has no tensor 'value_cache'");
  }
  {
    SafetensorsFile f = base;
    f.tensors.erase("context_lens");
    expect_refused(f, "neither context_lens");
  }
  {
    SafetensorsFile f = base;
    f.tensors["cu_seqlens_q"] = to_st(std::vector<int32_t>{0, 1, 2}, {3});
    expect_refused(f, "holds both");
  }
  {
    SafetensorsFile f = base;
    f.tensors.erase("context_lens");
    f.tensors["cu_seqlens_q"] = to_st(std::vector<int32_t>{0, 1, 2}, {3});
    expect_refused(f, "has cu_seqlens_q but no cu_seqlens_k");
  }
  {
    SafetensorsFile f = base;
    f.tensors["query"].shape = {2, 8 * 32};
    expect_refused(f, "query has shape [2, 256], expected rank 3");
  }
  {
    SafetensorsFile f = base;
    f.tensors["context_lens"] = to_st(std::vector<int32_t>{9, 30, 1}, {3});
    expect_refused(f, "context_lens has 3 entries but block_tables has 2 rows");
  }
  {
    SafetensorsFile f = base;
    f.tensors["block_tables"].dtype = StDType::f32;
    expect_refused(f, "block_tables has dtype F32, expected I32");
  }
  {
    SafetensorsFile f = base;
    HostTensor out(DType::f32, {2, 8, 32});
    f.tensors["out"] = to_st(out);
    expect_refused(f, "out is F32 but query is F16");
  }
  {
    SafetensorsFile f = base;
    f.tensors["out"] = to_st(HostTensor(DType::f16, {2, 8, 16}));
    expect_refused(f, "out has shape [2, 8, 16]");
  }
  {
    SafetensorsFile f = base;
    f.tensors["lse"] = to_st(std::vector<float>(8, 0.f), {8});
    expect_refused(f, "lse has shape [8], expected [2, 8]");
  }
  {
    SafetensorsFile f = base;
    f.tensors["lse"] = to_st(HostTensor(DType::f16, {2, 8}));
    expect_refused(f, "lse has dtype F16, expected F32");
  }
  const Problem pre = make_prefill_problem(prefill_params(), {4, 2}, {4, 9}, {});
  const SafetensorsFile pbase = replay_to_safetensors(pre, nullptr, nullptr);
  {
    SafetensorsFile f = pbase;
    f.tensors["cu_seqlens_q"] = to_st(std::vector<int32_t>{0, 4, 5}, {3});
    expect_refused(f, "cu_seqlens_q ends at 5 but query has 6 rows");
  }
  {
    SafetensorsFile f = pbase;
    f.tensors["cu_seqlens_k"] = to_st(std::vector<int32_t>{0, 4}, {2});
    expect_refused(f, "cu_seqlens_k has 2 entries, expected block_tables rows + 1 = 3");
  }
}

TEST(Replay, SaveOutputsWritesOutAndLse) {
  const Problem pr = make_prefill_problem(prefill_params(), {3, 2}, {3, 1}, {.seed = 3});
  const ReferenceResult ref = reference_attention(pr, {.threads = 1, .rows = {}});
  const HostTensor out = reference_out_as(ref, DType::bf16);
  const std::vector<float> lse = reference_lse_as_float(ref);
  const fs::path path = temp_file("out.safetensors");
  save_outputs(path.string(), out, lse);
  const SafetensorsFile f = read_safetensors(path.string());
  fs::remove(path);
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors.at("out").dtype, StDType::bf16);
  EXPECT_EQ(f.tensors.at("out").shape, (std::vector<int64_t>{5, 4, 16}));
  EXPECT_EQ(f.tensors.at("out").data, out.data);
  EXPECT_EQ(f.tensors.at("lse").dtype, StDType::f32);
  EXPECT_EQ(f.tensors.at("lse").shape, (std::vector<int64_t>{5, 4}));
  const std::vector<float> back = to_float32(f.tensors.at("lse"), "lse");
  for (std::size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i], float(ref.lse[i])) << i;
  }
  EXPECT_THROW(save_outputs(path.string(), out, std::vector<float>(3)), InputError);
}

TEST(Replay, RoundsDoublesOnceToNearestEven) {
  // 1 + 2^-11 + 2^-40 is just above the fp16 midpoint between 1 and 1 + 2^-10; rounding through
  // float first lands exactly on the midpoint and then ties down to 1.
  const double above = 1.0 + 0x1p-11 + 0x1p-40;
  EXPECT_EQ(round_double_to(DType::f16, above), 1.0f + 0x1p-10f);
  EXPECT_EQ(round_double_to(DType::f16, 1.0 + 0x1p-11), 1.0f); // exact tie: to even
  EXPECT_EQ(round_double_to(DType::f16, 1.0 + 3 * 0x1p-11), 1.0f + 0x1p-9f);
  EXPECT_EQ(round_double_to(DType::bf16, 1.0 + 0x1p-8 + 0x1p-40), 1.0f + 0x1p-7f);
  EXPECT_EQ(round_double_to(DType::bf16, -(1.0 + 0x1p-8 - 0x1p-40)), -1.0f);
  EXPECT_EQ(round_double_to(DType::f32, 1.0 + 0x1p-24 + 0x1p-50), 1.0f + 0x1p-23f);
  EXPECT_TRUE(std::isinf(round_double_to(DType::f16, 1e6)));
  EXPECT_EQ(round_double_to(DType::f16, 1e-30), 0.0f);
  EXPECT_EQ(round_double_to(DType::f16, 0.0), 0.0f);

  // Against a brute-force nearest-even search over the neighbours of the fp16 candidate.
  std::mt19937_64 gen(42);
  std::uniform_real_distribution<double> mag(-20.0, 14.99);
  for (int n = 0; n < 200000; ++n) {
    const double v =
        std::ldexp(1.0 + double(gen() >> 11) * 0x1p-53, int(mag(gen))) * ((gen() & 1) ? 1 : -1);
    const uint16_t c = float_to_half(float(v));
    uint16_t best = c;
    double best_err = std::abs(double(half_to_float(c)) - v);
    for (int d : {-1, 1}) {
      const uint16_t o = uint16_t(c + d);
      if ((o & 0x8000) != (c & 0x8000) || std::isinf(half_to_float(o))) {
        continue;
      }
      const double err = std::abs(double(half_to_float(o)) - v);
      if (err < best_err || (err == best_err && (o & 1) == 0)) {
        best = o;
        best_err = err;
      }
    }
    ASSERT_EQ(float_to_half(round_double_to(DType::f16, v)), best) << "v=" << v;
  }
}

// ---------------------------------------------------------------------------------------------
// KV-cache layouts (SPEC.md "KV-cache layouts"): the metadata entry kv_layout says how the
// caches are stored.

TEST(Replay, EveryKvLayoutRoundTripsAndReplaysTheSameAnswer) {
  for (bool decode : {true, false}) {
    const AttnParams p = decode ? decode_params() : prefill_params();
    const auto make = [&](KvLayout l) {
      return decode ? make_decode_problem(p, {1, 15, 16, 17, 40}, {.seed = 8, .kv_layout = l})
                    : make_prefill_problem(p, {5, 16, 3}, {40, 16, 9}, {.seed = 8, .kv_layout = l});
    };
    const Problem hnd = make(KvLayout::HND);
    const ReferenceResult ref = reference_attention(hnd, {.threads = 2, .rows = {}});
    const HostTensor out = reference_out_as(ref, p.dtype);
    for (KvLayout l : kAllKvLayouts) {
      SCOPED_TRACE(std::string(decode ? "decode " : "prefill ") + kv_layout_name(l));
      const Problem pr = make(l);
      const fs::path path = temp_file(std::string("layout_") + kv_layout_name(l) + ".safetensors");
      save_replay(path.string(), pr, &out, nullptr);
      const SafetensorsFile raw = read_safetensors(path.string());
      const ReplayFile rf = load_replay(path.string());
      fs::remove(path);
      // Written in the problem's own layout, and said so.
      EXPECT_EQ(raw.metadata.at("kv_layout"), kv_layout_name(l));
      EXPECT_EQ(raw.tensors.at("key_cache").shape, pr.key_cache.shape);
      EXPECT_EQ(raw.tensors.at("value_cache").shape, pr.value_cache.shape);
      EXPECT_EQ(rf.problem.kv_layout, l);
      expect_same_problem(pr, rf.problem);
      const ReferenceResult again = reference_attention(rf.problem, {.threads = 2, .rows = {}});
      EXPECT_EQ(again.out, ref.out);
      ASSERT_TRUE(rf.out);
      EXPECT_TRUE(check_output(*rf.out, nullptr, again, tolerance_for(p.dtype)).pass);
    }
  }
}

TEST(Replay, KvLayoutIsHndWhenAbsentAndAcceptsAnyCase) {
  const Problem nhd = make_decode_problem(decode_params(), {9, 30}, {.kv_layout = KvLayout::NHD});
  SafetensorsFile f = replay_to_safetensors(nhd, nullptr, nullptr);
  f.metadata["kv_layout"] = "nhd";
  EXPECT_EQ(replay_from_safetensors(f, "x").problem.kv_layout, KvLayout::NHD);
  const Problem hnd = make_decode_problem(decode_params(), {9, 30}, {});
  f = replay_to_safetensors(hnd, nullptr, nullptr);
  f.metadata.erase("kv_layout");
  EXPECT_EQ(replay_from_safetensors(f, "x").problem.kv_layout, KvLayout::HND);
}

TEST(Replay, CachesThatDoNotFitTheDeclaredLayoutAreRefused) {
  const Problem hnd = make_decode_problem(decode_params(), {9, 30}, {});
  const std::string n = std::to_string(hnd.num_blocks);
  {
    SafetensorsFile f = replay_to_safetensors(with_kv_layout(hnd, KvLayout::NHD), nullptr, nullptr);
    f.tensors["value_cache"] = to_st(hnd.value_cache); // HND value beside an NHD key
    expect_refused(f, "value_cache has shape [" + n + ", 2, 16, 32], expected [" + n +
                          ", 16, 2, 32] for kv_layout NHD [num_blocks, block_size, "
                          "num_kv_heads, head_dim]");
  }
  {
    // HND caches [n, 2, 16, 32] declared NHD have a plausible shape there (block_size 2, 16 kv
    // heads), and fail later: the message says which dimensions the layout gave.
    SafetensorsFile f = replay_to_safetensors(hnd, nullptr, nullptr);
    f.metadata["kv_layout"] = "NHD";
    expect_refused(f, "num_heads 8 is not a multiple of num_kv_heads 16 (num_kv_heads 16 and "
                      "block_size 2 read from key_cache [" +
                          n + ", 2, 16, 32] as kv_layout NHD");
  }
  {
    SafetensorsFile f = replay_to_safetensors(hnd, nullptr, nullptr);
    f.metadata["kv_layout"] = "vllm"; // a rank-4 key cache cannot be vllm's
    expect_refused(f, "key_cache has shape [" + n +
                          ", 2, 16, 32], expected rank 5 for kv_layout "
                          "vllm [num_blocks, num_kv_heads, head_dim / x, block_size, x]");
  }
  const Problem vllm = with_kv_layout(hnd, KvLayout::vllm);
  {
    SafetensorsFile f = replay_to_safetensors(vllm, nullptr, nullptr);
    f.tensors["value_cache"] = to_st(hnd.value_cache); // HND value beside a vllm key
    expect_refused(f, "value_cache has shape [" + n + ", 2, 16, 32], expected [" + n +
                          ", 2, 32, 16] for kv_layout vllm");
  }
  {
    SafetensorsFile f = replay_to_safetensors(vllm, nullptr, nullptr);
    f.tensors["key_cache"].shape = {hnd.num_blocks, 2, 8, 16, 4}; // fp32's x on fp16 data
    expect_refused(f, "key_cache has shape [" + n + ", 2, 8, 16, 4], expected [" + n +
                          ", 2, 4, 16, 8] for kv_layout vllm");
  }
  {
    SafetensorsFile f = replay_to_safetensors(vllm, nullptr, nullptr);
    f.metadata.erase("kv_layout"); // vllm caches read as the default HND
    expect_refused(f, "key_cache has shape [" + n +
                          ", 2, 4, 16, 8], expected rank 4 for "
                          "kv_layout HND");
  }
  {
    SafetensorsFile f = replay_to_safetensors(hnd, nullptr, nullptr);
    f.tensors["key_cache"].shape = {hnd.num_blocks, 2, 16, 16}; // head_dim 16 vs query's 32
    f.tensors["value_cache"].shape = {hnd.num_blocks, 2, 16, 16};
    expect_refused(f, "key_cache head_dim 16 differs from query head_dim 32");
  }
}

TEST(Replay, BadKvLayoutValueIsOneLineNamingIt) {
  const SafetensorsFile base =
      replay_to_safetensors(make_decode_problem(decode_params(), {9}, {}), nullptr, nullptr);
  for (const char* bad : {"", "HDN", "paged", "None", "NHD "}) {
    SafetensorsFile f = base;
    f.metadata["kv_layout"] = bad;
    SCOPED_TRACE(bad);
    expect_refused(f, "__metadata__ kv_layout = '" + std::string(bad) +
                          "' is not a KV-cache layout (HND, NHD or vllm)");
  }
}

// A small file can hold a call past what a profile may ask for (one block shared by every page of
// a long table, a billion heads over no rows): refused in one line naming the limit, where the
// reference would run for hours or end in std::bad_alloc (an outside writer's files). And a call
// whose reference needs more memory than is left here says so with the figures.
TEST(Replay, CallsPastTheProfilesLimitsOrTheMemoryLeftAreRefused) {
  const Problem dec = make_decode_problem(decode_params(), {9, 30}, {});
  const SafetensorsFile base = replay_to_safetensors(dec, nullptr, nullptr);
  // 10,000,001 keys of one sequence, every page its table's block 0.
  const int keys = 10'000'001;
  const int pages = (keys + 15) / 16;
  {
    SafetensorsFile f = base;
    f.tensors["block_tables"] =
        to_st(std::vector<int32_t>(std::size_t(2) * pages, 0), {2, int64_t(pages)});
    f.tensors["context_lens"] = to_st(std::vector<int32_t>{keys, 30}, {2});
    expect_refused(f,
                   "sequence 0's key length 10000001 is past the 10000000 a profile may ask for");
  }
  {
    SafetensorsFile f = base;
    f.metadata["softcap"] = "1e-40";
    expect_refused(f, "softcap = 1e-40 is below fp32's smallest normal number");
  }
  // Within the limits, the memory the reference would hold is weighed against what is left.
  Problem big = dec;
  big.context_lens = {10'000'000, 30};
  big.max_blocks_per_seq = 625'000;
  big.block_tables.assign(std::size_t(2) * big.max_blocks_per_seq, 0);
  // K, V and |V| of 10M keys x 32 dims as doubles for one worker: about 7.2 GiB.
  EXPECT_GT(reference_peak_bytes(big, 1), int64_t(7) << 30);
  EXPECT_LT(reference_peak_bytes(big, 1), int64_t(8) << 30);
  // Two workers, two KV heads: both on the longest sequence.
  EXPECT_GT(reference_peak_bytes(big, 2), int64_t(14) << 30);
  try {
    refuse_past_memory(big, 1, "dump.safetensors");
    // (a machine with more than 7.2 GiB left accepts it)
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("dump.safetensors: the reference needs about 7."),
              std::string::npos)
        << e.what();
  }
}

// Metadata keys under another library's name or case are ignored, so the call takes those
// parameters' defaults: each is listed for the warning replay prints. Unknown keys of the engine's
// own (format, versions) are not.
TEST(Replay, MetadataUnderAnotherNameIsListed) {
  SafetensorsFile f =
      replay_to_safetensors(make_decode_problem(decode_params(), {9}, {}), nullptr, nullptr);
  f.metadata["window_size_left"] = "20";
  f.metadata["logits_soft_cap"] = "12.5";
  f.metadata["Causal"] = "false";
  f.metadata["format"] = "pt";
  const ReplayFile rf = replay_from_safetensors(f, "x");
  EXPECT_EQ(rf.misnamed,
            (std::vector<std::string>{"Causal (attn-tune reads causal, in lower case)",
                                      "logits_soft_cap (attn-tune reads softcap)",
                                      "window_size_left (attn-tune reads window_left)"}));
}

// cu_seqlens that decrease are named so, not by the end the decrease leads to; caches of another
// layout read as the default HND say the layout was the default.
TEST(Replay, ADecreasingCuSeqlensAndADefaultLayoutAreNamed) {
  const Problem pre = make_prefill_problem(prefill_params(), {9, 4}, {9, 4}, {});
  {
    SafetensorsFile f = replay_to_safetensors(pre, nullptr, nullptr);
    f.tensors["cu_seqlens_q"] = to_st(std::vector<int32_t>{0, 9, 4}, {3});
    expect_refused(f, "cu_seqlens_q decreases at index 2 (9 -> 4), a negative length");
  }
  const Problem hnd = make_decode_problem(decode_params(), {9, 30}, {});
  SafetensorsFile f = replay_to_safetensors(with_kv_layout(hnd, KvLayout::NHD), nullptr, nullptr);
  f.metadata.erase("kv_layout");
  expect_refused(f, "as kv_layout HND [num_blocks, num_kv_heads, block_size, head_dim], the "
                    "default: no __metadata__ kv_layout)");
}
