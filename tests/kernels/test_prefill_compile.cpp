// NVRTC compilation of kernels/prefill.cuh without a GPU: the configurations the CUDA backend can
// choose compile for sm_80 and sm_90 with no local memory and registers that fit the block.
#include <gtest/gtest.h>

#ifdef ATTN_HAVE_CUDA
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "src/tuning/workloads.h"
#include "src/backends/cuda/cuda_backend.h"
#include "src/backends/cuda/nvrtc_compiler.h"
#include "src/backends/cuda/prefill_launch.h"
#include "src/tuning/profile.h"

using namespace attn;
using namespace attn::cuda;

namespace {

AttnParams params_for(DType dt, int head_dim, int block_size) {
  AttnParams p;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = head_dim;
  p.block_size = block_size;
  p.dtype = dt;
  return p;
}

struct Job {
  PrefillVariant v;
  int arch;
};

bool full_compile() {
  const char* full = std::getenv("ATTN_FULL_COMPILE");
  return full != nullptr && std::string(full) == "1";
}

// ATTN_FULL_COMPILE=1: the whole config space of every dtype, cache (the query's, E4M3, E5M2)
// and head_dim, with the block size
// rotating through 8, 16, 24, 256 (it only enters the gather's division). Otherwise, for CI
// time (each compile takes seconds; 12 compiles): for every dtype the register-heaviest
// configurations, head_dim 256 (both architectures) and 192 (one, alternating) with the widest
// key tile and one stage (most live registers), plus one rotating two-stage configuration at
// head_dim 128, 192, 64 on sm_80; every value of every parameter appears at least once.
std::vector<Job> jobs_to_compile() {
  std::vector<Job> out;
  const int block_sizes[] = {8, 16, 24, 256};
  int i = 0;
  if (full_compile()) {
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      for (std::optional<DType> kv : {std::optional<DType>{}, std::optional(DType::fp8_e4m3),
                                      std::optional(DType::fp8_e5m2)}) {
        for (int d : kPrefillHeadDims) {
          AttnParams p = params_for(dt, d, block_sizes[i++ % 4]);
          p.kv_dtype = kv;
          for (const auto& c : prefill_config_space(p)) {
            out.push_back({prefill_variant(c, p), 80});
            out.push_back({prefill_variant(c, p), 90});
          }
        }
      }
    }
    return out;
  }
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (int d : {256, 192}) {
      const AttnParams p = params_for(dt, d, block_sizes[i % 4]);
      const KernelConfig heavy{
          Family::prefill,
          {{"q_tile", i % 2 ? 128 : 64}, {"k_tile", 32}, {"warps", i % 2 ? 8 : 4}, {"stages", 1}}};
      if (d == 256) {
        out.push_back({prefill_variant(heavy, p), 80});
        out.push_back({prefill_variant(heavy, p), 90});
      } else {
        out.push_back({prefill_variant(heavy, p), i % 4 == 1 ? 80 : 90});
      }
      ++i;
    }
    const int light_dims[] = {128, 192, 64}; // 192: the only place k_tile 16 is sampled
    const AttnParams p = params_for(dt, light_dims[i / 2 - 1], block_sizes[i % 4]);
    const auto space = prefill_config_space(p);
    out.push_back({prefill_variant(space[std::size_t(i * 3 + 1) % space.size()], p), 80});
  }
  // fp8 caches (KV_DTYPE): the heaviest configuration at head_dim 256 for each format under a
  // 16-bit query, on sm_90 (the cvt.f16x2 conversions) and sm_80 (in software), and one fp32
  // query over E4M3 at head_dim 128.
  for (DType kv : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    AttnParams p = params_for(kv == DType::fp8_e4m3 ? DType::f16 : DType::bf16, 256, 16);
    p.kv_dtype = kv;
    const KernelConfig heavy{
        Family::prefill, {{"q_tile", 64}, {"k_tile", 32}, {"warps", 4}, {"stages", 1}}};
    out.push_back({prefill_variant(heavy, p), 80});
    out.push_back({prefill_variant(heavy, p), 90});
  }
  AttnParams p32 = params_for(DType::f32, 128, 24);
  p32.kv_dtype = DType::fp8_e4m3;
  const KernelConfig two_stage{
      Family::prefill, {{"q_tile", 64}, {"k_tile", 32}, {"warps", 4}, {"stages", 2}}};
  out.push_back({prefill_variant(two_stage, p32), 90});
  return out;
}

// Every variant a shipped profile can choose (its prefill workloads x the configuration space),
// for sm_90, the architecture the profiles are tuned on, added to the sample when it is not
// already there (the sample compiles for sm_80 too; one architecture here keeps CI in its time).
// For CI time, every fourth of the variants in their order unless ATTN_FULL_COMPILE=1 (every
// second took 2 CPU-minutes of CI).
void add_variants_the_profiles_name(std::vector<Job>& jobs) {
  std::size_t seen = 0;
  for (const auto& name : builtin_profile_names()) {
    for (const auto& w : expand_workloads(load_profile(name))) {
      if (w.phase != Phase::prefill) {
        continue;
      }
      for (const auto& c : prefill_config_space(w.params)) {
        const PrefillVariant v = prefill_variant(c, w.params);
        const bool have = std::any_of(jobs.begin(), jobs.end(),
                                      [&](const Job& j) { return j.arch == 90 && j.v == v; });
        if (!have && (full_compile() || seen++ % 4 == 0)) {
          jobs.push_back({v, 90});
        }
      }
    }
  }
}

} // namespace

TEST(NvrtcPrefillCompile, EveryConfigurationCompilesWithoutSpills) {
  std::vector<Job> jobs = jobs_to_compile();
  add_variants_the_profiles_name(jobs);
  const NvrtcCompiler compiler(std::nullopt); // no cache: every job runs NVRTC and ptxas
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<std::string> notes;
  auto worker = [&] {
    for (std::size_t i = next++; i < jobs.size(); i = next++) {
      const Job& j = jobs[i];
      const std::string what = j.v.describe() + " sm_" + std::to_string(j.arch);
      std::string problem;
      std::string note;
      try {
        const CompileResult r = compiler.compile(prefill_compile_request(j.v, {j.arch, true}));
        const auto it = std::find_if(r.kernels.begin(), r.kernels.end(),
                                     [](const auto& k) { return k.name == kPrefillEntry; });
        if (it == r.kernels.end()) {
          problem = " no ptxas report for prefill";
        } else {
          if (it->spill_store_bytes != 0 || it->spill_load_bytes != 0 || it->stack_bytes != 0) {
            problem += " uses local memory (stack " + std::to_string(it->stack_bytes) +
                       ", spill stores " + std::to_string(it->spill_store_bytes) + ", loads " +
                       std::to_string(it->spill_load_bytes) + ");";
          }
          if (it->registers <= 0 || it->registers * j.v.threads() > 65536) {
            problem += " registers " + std::to_string(it->registers) + ";";
          }
          note = what + ": " + std::to_string(it->registers) + " registers";
        }
      } catch (const std::exception& e) {
        problem = e.what();
      }
      std::lock_guard<std::mutex> lock(mu);
      if (!problem.empty()) {
        failures.push_back(what + ":" + problem);
      }
      if (!note.empty()) {
        notes.push_back(note);
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
  if (std::getenv("ATTN_COMPILE_VERBOSE") != nullptr) {
    std::sort(notes.begin(), notes.end());
    for (const auto& s : notes) {
      std::printf("%s\n", s.c_str());
    }
  }
  for (const auto& f : failures) {
    ADD_FAILURE() << f;
  }
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << jobs.size() << " compiles failed";
}

TEST(NvrtcPrefillCompile, PtxUsesTensorCoresAndCpAsync) {
  const NvrtcCompiler compiler(std::nullopt);
  const AttnParams p = params_for(DType::bf16, 128, 16);
  const PrefillVariant v = prefill_variant({Family::prefill, {}}, p);
  const CompileResult r = compiler.compile(prefill_compile_request(v, {80, false}));
  const std::string ptx(r.image.data());
  EXPECT_NE(ptx.find(".entry prefill("), std::string::npos);
  EXPECT_NE(ptx.find("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"), std::string::npos);
  EXPECT_NE(ptx.find("cp.async.cg.shared.global"), std::string::npos);
}

#else
TEST(NvrtcPrefillCompile, NeedsTheCudaToolkit) {
  GTEST_SKIP() << "built without the CUDA Toolkit: no NVRTC to test";
}
#endif
