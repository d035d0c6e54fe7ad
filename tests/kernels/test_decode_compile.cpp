// NVRTC compilation of the decode kernels without a GPU: every configuration the CUDA backend can
// choose compiles for sm_80 and sm_90 with no local memory; the cache; compile errors.
#include <gtest/gtest.h>

#ifdef ATTN_HAVE_CUDA
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "src/tuning/workloads.h"
#include "src/backends/cuda/cuda_backend.h"
#include "src/backends/cuda/decode_launch.h"
#include "src/backends/cuda/embedded_kernels.h"
#include "src/backends/cuda/nvrtc_compiler.h"
#include "src/tuning/profile.h"

using namespace attn;
using namespace attn::cuda;

namespace {

std::filesystem::path fresh_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() /
           ("attn-nvrtc-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d;
}

AttnParams params_for(DType dt, int head_dim, int block_size, int group) {
  AttnParams p;
  p.num_kv_heads = 4;
  p.num_heads = 4 * group;
  p.head_dim = head_dim;
  p.block_size = block_size;
  p.dtype = dt;
  return p;
}

struct Job {
  DecodeVariant v;
  int arch;
};

// The variants to compile. ATTN_FULL_COMPILE=1: the whole config space of every dtype, head_dim,
// block_size and GQA group (1, 4, 8), thousands of compiles. Otherwise a deterministic sample
// sized for CI: for every (dtype, head_dim) pair the register-heaviest variant (split=1 with 8
// query heads per KV head), alternating decode_v1 / decode_v2, plus a split=0 variant of the
// other family for every third pair; block size, threads, vec and partition rotate so that each
// value of each is compiled at least once.
std::vector<DecodeVariant> variants_to_compile() {
  std::vector<DecodeVariant> out;
  const char* full = std::getenv("ATTN_FULL_COMPILE");
  if (full != nullptr && std::string(full) == "1") {
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      for (int d : kDecodeHeadDims) {
        for (int bs : kDecodeBlockSizes) {
          for (int group : {1, 4, 8}) {
            const AttnParams p = params_for(dt, d, bs, group);
            for (Family f : {Family::decode_v1, Family::decode_v2}) {
              for (const auto& c : decode_config_space(f, p)) {
                out.push_back(decode_variant(c, p));
              }
            }
          }
        }
      }
    }
    return out;
  }
  const int threads[] = {64, 128, 256};
  int i = 0;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (int d : kDecodeHeadDims) {
      const AttnParams p = params_for(dt, d, kDecodeBlockSizes[i % 5], 8);
      const Family heavy = i % 2 == 0 ? Family::decode_v1 : Family::decode_v2;
      const Family light = i % 2 == 0 ? Family::decode_v2 : Family::decode_v1;
      KernelConfig h{heavy,
                     {{"threads", threads[i % 3]},
                      {"vec", i % 4 < 2 ? max_vec(dt) : max_vec(dt) / 2},
                      {"split", 1}}};
      KernelConfig l{light,
                     {{"threads", threads[(i + 1) % 3]},
                      {"vec", i % 4 < 2 ? max_vec(dt) / 2 : max_vec(dt)},
                      {"split", 0}}};
      if (heavy == Family::decode_v2) {
        h.params["partition"] = kDecodePartitions[i % 3];
      } else {
        l.params["partition"] = kDecodePartitions[i % 3];
      }
      out.push_back(decode_variant(h, p));
      if (i % 3 == 0) {
        out.push_back(decode_variant(l, p));
      }
      ++i;
    }
  }
  return out;
}

// Every variant a shipped profile can choose: its decode workloads' parameters crossed with the
// backend's configuration space (the profiles name "auto"), deduplicated. 264 variants today.
std::vector<DecodeVariant> variants_the_profiles_name() {
  std::vector<DecodeVariant> out;
  for (const auto& name : builtin_profile_names()) {
    for (const auto& w : expand_workloads(load_profile(name))) {
      if (w.phase != Phase::decode) {
        continue;
      }
      for (Family f : {Family::decode_v1, Family::decode_v2}) {
        for (const auto& c : decode_config_space(f, w.params)) {
          const DecodeVariant v = decode_variant(c, w.params);
          if (std::find(out.begin(), out.end(), v) == out.end()) {
            out.push_back(v);
          }
        }
      }
    }
  }
  return out;
}

} // namespace

TEST(NvrtcCompile, EveryDecodeConfigurationCompilesWithoutSpills) {
  std::vector<DecodeVariant> variants = variants_to_compile();
  for (const auto& v : variants_the_profiles_name()) {
    if (std::find(variants.begin(), variants.end(), v) == variants.end()) {
      variants.push_back(v);
    }
  }
  std::vector<Job> jobs;
  for (const auto& v : variants) {
    for (int arch : {80, 90}) {
      jobs.push_back({v, arch});
    }
  }
  const NvrtcCompiler compiler(std::nullopt); // no cache: every job really runs NVRTC and ptxas
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  std::vector<std::string> failures;
  auto worker = [&] {
    for (std::size_t i = next++; i < jobs.size(); i = next++) {
      const Job& j = jobs[i];
      const std::string what = j.v.describe() + " sm_" + std::to_string(j.arch);
      std::string problem;
      try {
        const CompileResult r = compiler.compile(decode_compile_request(j.v, {j.arch, true}));
        std::vector<std::string> want = {decode_entry(j.v.family)};
        if (j.v.family == Family::decode_v2) {
          want.push_back(kDecodeReduceEntry);
        }
        for (const auto& name : want) {
          const auto it = std::find_if(r.kernels.begin(), r.kernels.end(),
                                       [&](const KernelResources& k) { return k.name == name; });
          if (it == r.kernels.end()) {
            problem += " no ptxas report for " + name + ";";
            continue;
          }
          const int threads = name == kDecodeReduceEntry ? kReduceThreads : j.v.threads;
          if (it->spill_store_bytes != 0 || it->spill_load_bytes != 0 || it->stack_bytes != 0) {
            problem += " " + name + " uses local memory (stack " + std::to_string(it->stack_bytes) +
                       ", spill stores " + std::to_string(it->spill_store_bytes) + ", loads " +
                       std::to_string(it->spill_load_bytes) + ");";
          }
          if (it->registers <= 0 || it->registers * threads > 65536) {
            problem += " " + name + " registers " + std::to_string(it->registers) + ";";
          }
        }
      } catch (const std::exception& e) {
        problem = e.what();
      }
      if (!problem.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(what + ":" + problem);
      }
    }
  };
  const unsigned n = std::max(2u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < n; ++w) {
    pool.emplace_back(worker);
  }
  for (auto& t : pool) {
    t.join();
  }
  for (const auto& f : failures) {
    ADD_FAILURE() << f;
  }
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << jobs.size() << " compiles failed";
}

TEST(NvrtcCompile, CacheHitReturnsTheSameImageAndReport) {
  const auto dir = fresh_dir("cache");
  const NvrtcCompiler compiler(dir);
  AttnParams p = params_for(DType::f16, 64, 16, 1);
  const DecodeVariant v = decode_variant({Family::decode_v1, {{"threads", 64}}}, p);
  const CompileRequest req = decode_compile_request(v, {80, true});
  const CompileResult first = compiler.compile(req);
  EXPECT_FALSE(first.from_cache);
  const auto file = dir / (NvrtcCompiler::cache_key(req) + ".bin");
  ASSERT_TRUE(std::filesystem::exists(file));
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(e.path().extension(), ".bin") << "temporary file left behind: " << e.path();
  }
  const CompileResult second = compiler.compile(req);
  EXPECT_TRUE(second.from_cache);
  EXPECT_EQ(second.image, first.image);
  ASSERT_EQ(second.kernels.size(), first.kernels.size());
  EXPECT_EQ(second.kernels[0].registers, first.kernels[0].registers);

  // A damaged file is recompiled, not trusted.
  {
    std::ofstream f(file, std::ios::binary | std::ios::trunc);
    f << "attn-tune-nvrtc-cache 1\ngarbage";
  }
  const CompileResult third = compiler.compile(req);
  EXPECT_FALSE(third.from_cache);
  EXPECT_EQ(third.image, first.image);
  EXPECT_TRUE(compiler.compile(req).from_cache);
  std::filesystem::remove_all(dir);
}

TEST(NvrtcCompile, CacheKeyCoversOptionsArchAndSource) {
  AttnParams p = params_for(DType::bf16, 128, 16, 1);
  const DecodeVariant v = decode_variant({Family::decode_v1, {}}, p);
  const CompileRequest base = decode_compile_request(v, {80, true});
  CompileRequest other_arch = base;
  other_arch.arch = 90;
  CompileRequest ptx = base;
  ptx.cubin = false;
  CompileRequest other_opt = base;
  other_opt.options.push_back("-DEXTRA=1");
  CompileRequest other_src = base;
  other_src.source += "\n";
  const std::string k = NvrtcCompiler::cache_key(base);
  EXPECT_EQ(k, NvrtcCompiler::cache_key(base));
  EXPECT_NE(k, NvrtcCompiler::cache_key(other_arch));
  EXPECT_NE(k, NvrtcCompiler::cache_key(ptx));
  EXPECT_NE(k, NvrtcCompiler::cache_key(other_opt));
  EXPECT_NE(k, NvrtcCompiler::cache_key(other_src));
}

TEST(NvrtcCompile, BrokenSourceReportsConfigurationAndLog) {
  const NvrtcCompiler compiler(std::nullopt);
  CompileRequest req;
  req.source_name = "broken.cuh";
  req.source = "#include \"attn_math.h\"\nextern \"C\" __global__ void k(float* x) { x[0] = y; }\n";
  req.headers = embedded_kernel_headers();
  req.arch = 80;
  req.description = "the broken test kernel";
  try {
    (void)compiler.compile(req);
    FAIL() << "a broken source compiled";
  } catch (const CompileError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("the broken test kernel"), std::string::npos) << msg;
    EXPECT_NE(msg.find("sm_80"), std::string::npos) << msg;
    EXPECT_NE(msg.find("broken.cuh(2)"), std::string::npos) << msg; // the log, with the line
    EXPECT_NE(msg.find("\"y\""), std::string::npos) << msg;
  }
}

TEST(NvrtcCompile, PtxForTheDriverToFinish) {
  const NvrtcCompiler compiler(std::nullopt);
  AttnParams p = params_for(DType::f32, 96, 32, 1);
  const DecodeVariant v = decode_variant({Family::decode_v2, {{"partition", 256}}}, p);
  const CompileResult r = compiler.compile(decode_compile_request(v, {80, false}));
  const std::string ptx(r.image.data());
  EXPECT_NE(ptx.find(".entry decode_v2("), std::string::npos);
  EXPECT_NE(ptx.find(".entry decode_v2_reduce("), std::string::npos);
}

TEST(NvrtcCompile, EmbeddedSourcesMatchTheTree) {
  for (const std::string name : {"decode.cuh", "attn_math.h"}) {
    std::ifstream f(std::string(ATTN_SOURCE_DIR) + "/kernels/" + name, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    EXPECT_TRUE(embedded_kernel(name) == s.str()) << name << " differs from the embedded copy";
  }
  EXPECT_THROW((void)embedded_kernel("missing.cuh"), std::runtime_error);
}

TEST(NvrtcCompile, ParsesPtxasReport) {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'decode_v2' for 'sm_90'\n"
      "ptxas info    : Function properties for decode_v2\n"
      "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 77 registers, used 1 barriers, 2624 bytes smem, 400 bytes cmem[0]\n"
      "ptxas info    : Compiling entry function 'decode_v2_reduce' for 'sm_90'\n"
      "ptxas info    : Function properties for decode_v2_reduce\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 32 registers, used 1 barriers, 16 bytes smem\n";
  const auto k = parse_ptxas_report(log);
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0].name, "decode_v2");
  EXPECT_EQ(k[0].registers, 77);
  EXPECT_EQ(k[0].stack_bytes, 8);
  EXPECT_EQ(k[0].spill_store_bytes, 4);
  EXPECT_EQ(k[0].spill_load_bytes, 12);
  EXPECT_EQ(k[0].smem_bytes, 2624);
  EXPECT_EQ(k[1].name, "decode_v2_reduce");
  EXPECT_EQ(k[1].registers, 32);
  EXPECT_EQ(k[1].spill_store_bytes, 0);
}

TEST(NvrtcCompile, DefaultCacheDirFollowsXdg) {
  const char* old_xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old_xdg ? old_xdg : "";
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg-test", 1);
  EXPECT_EQ(default_cache_dir(), std::filesystem::path("/tmp/xdg-test/attn-tune"));
  ::unsetenv("XDG_CACHE_HOME");
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    EXPECT_EQ(default_cache_dir(), std::filesystem::path(home) / ".cache" / "attn-tune");
  }
  if (old_xdg != nullptr) {
    ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  }
}

#else
TEST(NvrtcCompile, NeedsTheCudaToolkit) {
  GTEST_SKIP() << "built without the CUDA Toolkit: no NVRTC to test";
}
#endif
