// The plugin ABI end to end: loading and refusing libraries, what the CPU example declares, and
// proof that the ABI carries every field: the example plugin computes bit for bit what the
// built-in CPU backend computes, in every family, mask and layout the problem arrives in. Opening
// runs none of the plugin's code here (a child reads the declaration): an init that crashes,
// exits or hangs is one line, and the first call loads the library, checking it declares the same.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "src/backends/cpu/cpu_backend.h"
#include "src/backends/plugin/plugin_backend.h"
#include "src/backends/registry.h"
#include "src/model/errors.h"
#include "src/model/problem_gen.h"
#include "tests/support/files.h"

namespace attn {
namespace {

std::string error_of(const std::string& path) {
  try {
    (void)PluginLibrary::open(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(PluginLibrary, RefusesWhatIsNotAPluginWithOneLine) {
  EXPECT_NE(error_of("/nonexistent/plugin.so").find("no such file"), std::string::npos);
  const std::string text = std::string(ATTN_SOURCE_DIR) + "/README.md";
  EXPECT_NE(error_of(text).find("cannot load it"), std::string::npos);
  const std::string old = error_of(ATTN_OLD_ABI_PLUGIN);
  EXPECT_NE(old.find("was built for plugin ABI 0; this attn-tune speaks ABI 1 to 4"), std::string::npos)
      << old;
  EXPECT_EQ(old.find('\n'), std::string::npos);
}

TEST(PluginLibrary, ReadsTheCpuExampleDeclarations) {
  const auto lib = PluginLibrary::open(ATTN_CPU_EXAMPLE_PLUGIN);
  const PluginIdentity& id = lib->identity();
  EXPECT_EQ(id.name, "cpu-example");
  EXPECT_EQ(id.abi_version, ATTN_PLUGIN_ABI_VERSION);
  EXPECT_EQ(id.device_kind, ATTN_DEVICE_HOST);
  EXPECT_EQ(id.library_sha256.size(), 64u);
  ASSERT_EQ(lib->families().size(), 3u);
  // The configuration spaces are the built-in CPU backend's.
  auto cpu = make_cpu_backend({.threads = 2, .kernels = ""});
  AttnParams p;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  for (Family f : {Family::decode_v1, Family::decode_v2, Family::prefill}) {
    auto mine = lib->config_space(f);
    auto theirs = cpu->config_space(f, p);
    std::sort(mine.begin(), mine.end(), [](auto& a, auto& b) { return a.key() < b.key(); });
    std::sort(theirs.begin(), theirs.end(), [](auto& a, auto& b) { return a.key() < b.key(); });
    EXPECT_EQ(mine, theirs) << family_name(f);
  }
  const nlohmann::json j = id.to_json();
  EXPECT_EQ(j["source"], "plugin");
  EXPECT_EQ(j["name"], "cpu-example");
  EXPECT_EQ(j["library_sha256"], id.library_sha256);
}

TEST(PluginLibrary, OpeningRunsNothingOfThePluginHereTheFirstCallLoadsIt) {
  // The NHD test plugin, which no other test here opens: mapped into this process only by load.
  const auto mapped = [] {
    void* h = ::dlopen(ATTN_NHD_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
    if (h != nullptr) {
      ::dlclose(h);
    }
    return h != nullptr;
  };
  const auto lib = PluginLibrary::open(ATTN_NHD_PLUGIN);
  EXPECT_EQ(lib->identity().name, "cpu-example-nhd");
  EXPECT_EQ(lib->families().size(), 3u);
  EXPECT_FALSE(mapped());
  lib->load();
  EXPECT_TRUE(mapped());
}

// A copy of the init test plugin under a path of its own (the declaration is kept per path),
// removed with its folder when the test ends.
struct InitPluginCopy {
  explicit InitPluginCopy(const std::string& name) : dir(test::fresh_dir(name)) {
    std::filesystem::copy_file(ATTN_INIT_PLUGIN, dir / "libinit.so");
  }
  InitPluginCopy(const InitPluginCopy&) = delete;
  InitPluginCopy& operator=(const InitPluginCopy&) = delete;
  ~InitPluginCopy() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  [[nodiscard]] std::string path() const { return (dir / "libinit.so").string(); }
  std::filesystem::path dir;
};

TEST(PluginLibrary, AnInitThatCrashesExitsOrHangsIsOneLineAndThisProcessGoesOn) {
  const InitPluginCopy copy("init_fault");
  const std::string path = copy.path();
  ::setenv("ATTN_TEST_INIT", "abort", 1);
  std::string e = error_of(path);
  EXPECT_NE(e.find("plugin " + path +
                   ": the process that loads it to read its declaration was killed by SIGABRT"),
            std::string::npos)
      << e;
  ::setenv("ATTN_TEST_INIT", "exit", 1);
  e = error_of(path);
  EXPECT_NE(e.find("exited with status 0 before it declared anything"), std::string::npos) << e;
  ::setenv("ATTN_TEST_INIT", "hang", 1);
  ::setenv("ATTN_TUNE_PLUGIN_PROBE_TIMEOUT", "0.3", 1);
  e = error_of(path);
  EXPECT_NE(e.find("had not answered after 0.3 s"), std::string::npos) << e;
  ::setenv("ATTN_TUNE_PLUGIN_PROBE_TIMEOUT", "soon", 1);
  e = error_of(path);
  EXPECT_NE(e.find("ATTN_TUNE_PLUGIN_PROBE_TIMEOUT='soon' is not a number"), std::string::npos)
      << e;
  ::unsetenv("ATTN_TUNE_PLUGIN_PROBE_TIMEOUT");
  ::setenv("ATTN_TEST_INIT", "1.0", 1);
  EXPECT_EQ(PluginLibrary::open(path)->identity().version, "1.0");
  ::unsetenv("ATTN_TEST_INIT");
}

TEST(PluginLibrary, ALoadThatFindsAnotherDeclarationThanTheProbeSaysWhatChanged) {
  const InitPluginCopy copy("init_changed");
  const std::string path = copy.path();
  ::setenv("ATTN_TEST_INIT", "1.0", 1);
  const auto lib = PluginLibrary::open(path);
  EXPECT_EQ(lib->identity().version, "1.0");
  ::setenv("ATTN_TEST_INIT", "2.0", 1);
  std::string e;
  try {
    lib->load();
  } catch (const InputError& x) {
    e = x.what();
  }
  EXPECT_NE(e.find("plugin init-test (" + path +
                   ") declares something else in this process than "
                   "when attn-tune opened it (changed: its version)"),
            std::string::npos)
      << e;
  // The failure stands: the init does not run again on every call.
  ::setenv("ATTN_TEST_INIT", "1.0", 1);
  EXPECT_THROW(lib->load(), InputError);
  // A second opening of the same path takes the first one's declaration, and loads.
  const auto again = PluginLibrary::open(path);
  EXPECT_NO_THROW(again->load());
  ::unsetenv("ATTN_TEST_INIT");
}

TEST(PluginBackend, CanRunSaysWhyInTheHostsWordsAndThePlugins) {
  auto be = make_backend("cpu", {.threads = 2, .kernels = ATTN_CPU_EXAMPLE_PLUGIN});
  AttnParams p;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.block_size = 16;
  const Problem pr = make_decode_problem(p, {40, 3}, {});
  auto why = be->can_run({Family::decode_v2, {{"partition", 24}, {"split", 1}}}, pr);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("not a positive multiple of block_size 16"), std::string::npos) << *why;
  why = be->can_run({Family::decode_v1, {{"split", 1}, {"warps", 4}}}, pr);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("parameter 'warps' is not one plugin cpu-example declares"),
            std::string::npos);
  why = be->can_run({Family::decode_v1, {}}, pr);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("sets no 'split'"), std::string::npos);
  why = be->can_run({Family::prefill, {{"q_tile", 16}, {"k_tile", 32}, {"split", 1}}}, pr);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("runs prefill problems, not decode problems"), std::string::npos);
  EXPECT_FALSE(be->can_run({Family::decode_v1, {{"split", 0}}}, pr));
  EXPECT_EQ(be->kernels()["name"], "cpu-example");
}

TEST(PluginBackend, HostPluginOnAGpuDeviceIsAUsageError) {
  EXPECT_THROW((void)make_backend("cuda:0", {.threads = 0, .kernels = ATTN_CPU_EXAMPLE_PLUGIN}),
               InputError);
}

void expect_same_bits(const RunOutput& a, const RunOutput& b, const std::string& what) {
  ASSERT_EQ(a.out.data.size(), b.out.data.size()) << what;
  EXPECT_EQ(std::memcmp(a.out.data.data(), b.out.data.data(), a.out.data.size()), 0) << what;
  ASSERT_EQ(a.lse.size(), b.lse.size()) << what;
  EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)), 0) << what;
}

TEST(PluginBackend, TheCpuExampleComputesWhatTheBuiltInBackendComputes) {
  auto builtin = make_cpu_backend({.threads = 2, .kernels = ""});
  auto plugin = make_backend("cpu", {.threads = 2, .kernels = ATTN_CPU_EXAMPLE_PLUGIN});
  // The query dtypes over caches of their own dtype, and fp8 caches (ABI 4) with per-tensor and
  // per-KV-head scales.
  struct Dtypes {
    DType t;
    std::optional<DType> kv;
    std::vector<float> k_scale, v_scale;
  };
  const Dtypes dtypes[] = {{DType::f32, std::nullopt, {}, {}},
                           {DType::f16, std::nullopt, {}, {}},
                           {DType::bf16, std::nullopt, {}, {}},
                           {DType::f16, DType::fp8_e4m3, {0.02f}, {3.0f}},
                           {DType::bf16, DType::fp8_e5m2, {0.5f, 4.0f}, {2.0f, 0.125f}}};
  for (const Dtypes& dts : dtypes) {
    const DType t = dts.t;
    AttnParams p;
    p.num_heads = 8;
    p.num_kv_heads = 2;
    p.head_dim = 64;
    p.block_size = 16;
    p.dtype = t;
    p.kv_dtype = dts.kv;
    p.window_left = 37;
    p.softcap = 20.0;
    GenOptions g;
    g.seed = 11;
    g.k_scale = dts.k_scale;
    g.v_scale = dts.v_scale;
    const Problem dec = make_decode_problem(p, {1, 15, 16, 17, 513, 1100}, g);
    p.window_left = -1;
    p.window_right = 5;
    p.causal = false;
    const Problem pre = make_prefill_problem(p, {1, 40, 7}, {1, 90, 7}, g);
    for (const Problem* pr : {&dec, &pre}) {
      for (Family f : {Family::decode_v1, Family::decode_v2, Family::prefill}) {
        if (family_is_decode(f) != (pr->phase == Phase::decode)) {
          continue;
        }
        for (const KernelConfig& cfg : builtin->config_space(f, pr->params)) {
          const std::string what = pr->params.describe() + " " + cfg.key();
          expect_same_bits(run_once(*builtin, *pr, cfg), run_once(*plugin, *pr, cfg), what);
        }
      }
      // A problem in another layout reaches the HND plugin rearranged, with the same answer.
      const Problem nhd = with_kv_layout(*pr, KvLayout::NHD);
      const KernelConfig cfg = builtin->config_space(
          pr->phase == Phase::decode ? Family::decode_v2 : Family::prefill, pr->params)[0];
      expect_same_bits(run_once(*builtin, *pr, cfg), run_once(*plugin, nhd, cfg), "NHD input");
    }
  }
}

TEST(PluginBackend, TimesThroughTheHostClock) {
  auto plugin = make_backend("cpu", {.threads = 1, .kernels = ATTN_CPU_EXAMPLE_PLUGIN});
  AttnParams p;
  p.num_heads = 4;
  p.num_kv_heads = 4;
  p.head_dim = 32;
  const Problem pr = make_decode_problem(p, {200, 64}, {});
  auto run = plugin->prepare(pr, {Family::decode_v1, {{"split", 1}}});
  TimingOptions opt;
  opt.warmup = 1;
  opt.warmup_seconds = 0.0;
  opt.min_reps = 3;
  opt.max_reps = 5;
  opt.flush_cache = false;
  const TimingResult t = run->time(opt);
  EXPECT_GE(t.reps, 3);
  EXPECT_GT(t.median_s, 0.0);
  EXPECT_NE(t.method.find("plugin cpu-example"), std::string::npos) << t.method;
}

} // namespace
} // namespace attn
