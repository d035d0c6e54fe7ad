// NVRTC compilation of kernels/decode.cuh without a GPU: a sample of the configuration space for
// sm_90 (half of it for sm_80 too) and a sixth of the configurations a shipped profile can
// choose for sm_90 (all of them with ATTN_FULL_COMPILE=1) compile with no local memory (the
// compiler's own tests are in tests/backends/cuda/test_nvrtc_compiler.cpp).
#include <gtest/gtest.h>

#ifdef ATTN_HAVE_CUDA
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "src/backends/cuda/cuda_backend.h"
#include "src/backends/cuda/decode_launch.h"
#include "src/backends/cuda/nvrtc_compiler.h"
#include "src/tuning/profile.h"
#include "src/tuning/workloads.h"

using namespace attn;
using namespace attn::cuda;

namespace {

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

bool full_compile() {
  const char* full = std::getenv("ATTN_FULL_COMPILE");
  return full != nullptr && std::string(full) == "1";
}

// The variants to compile. ATTN_FULL_COMPILE=1: the whole config space of every dtype, head_dim,
// block_size and GQA group (1, 4, 8), over caches of the query dtype and both fp8 formats,
// thousands of compiles. Otherwise a deterministic sample
// sized for CI: for every (dtype, head_dim) pair the register-heaviest variant (split=1 with 8
// query heads per KV head), alternating decode_v1 / decode_v2, plus a split=0 variant of the
// other family for every third pair; block size, threads, vec and partition rotate so that each
// value of each is compiled at least once.
std::vector<DecodeVariant> variants_to_compile() {
  std::vector<DecodeVariant> out;
  if (full_compile()) {
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      for (std::optional<DType> kv : {std::optional<DType>{}, std::optional(DType::fp8_e4m3),
                                      std::optional(DType::fp8_e5m2)}) {
        for (int d : kDecodeHeadDims) {
          for (int bs : kDecodeBlockSizes) {
            for (int group : {1, 4, 8}) {
              AttnParams p = params_for(dt, d, bs, group);
              p.kv_dtype = kv;
              for (Family f : {Family::decode_v1, Family::decode_v2}) {
                for (const auto& c : decode_config_space(f, p)) {
                  out.push_back(decode_variant(c, p));
                }
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
  // fp8 caches (KV_DTYPE): each format under a 16-bit and an fp32 query, the heavy variant with
  // 8-byte loads and a light one with 4-byte loads; sm_90 converts with cvt.f16x2.e4m3x2 /
  // e5m2x2, sm_80 in software (the loop below gives every second variant both).
  int j = 0;
  for (DType kv : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    for (DType dt : {DType::f16, DType::bf16, DType::f32}) {
      const int d = kDecodeHeadDims[(3 * j + 1) % std::size(kDecodeHeadDims)];
      AttnParams p = params_for(dt, d, kDecodeBlockSizes[j % 5], 8);
      p.kv_dtype = kv;
      KernelConfig h{j % 2 == 0 ? Family::decode_v1 : Family::decode_v2,
                     {{"threads", threads[j % 3]}, {"vec", 8}, {"split", 1}}};
      KernelConfig l{j % 2 == 0 ? Family::decode_v2 : Family::decode_v1,
                     {{"threads", threads[(j + 1) % 3]}, {"vec", 4}, {"split", 0}}};
      (h.family == Family::decode_v2 ? h : l).params["partition"] = kDecodePartitions[j % 3];
      out.push_back(decode_variant(h, p));
      out.push_back(decode_variant(l, p));
      ++j;
    }
  }
  return out;
}

// Every variant a shipped profile can choose: its decode workloads' parameters crossed with the
// backend's configuration space (the profiles name "auto"), deduplicated (264 variants in
// December 2026). For CI time, every sixth of them in that order unless ATTN_FULL_COMPILE=1:
// the whole set took 6 of CI's 20 minutes on 2 cores, every third still 3.4 CPU-minutes; each
// value of each parameter is still compiled by the sample, and a full run is one environment
// variable away.
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
  if (!full_compile()) {
    std::vector<DecodeVariant> sixth;
    for (std::size_t i = 0; i < out.size(); i += 6) {
      sixth.push_back(out[i]);
    }
    return sixth;
  }
  return out;
}

} // namespace

TEST(NvrtcCompile, EveryDecodeConfigurationCompilesWithoutSpills) {
  // The sample for sm_90, and every second variant of it for sm_80 too (the whole sample with
  // ATTN_FULL_COMPILE=1); the profiles' variants (above) for sm_90, the architecture they are
  // tuned on.
  const std::vector<DecodeVariant> sample = variants_to_compile();
  const bool all_archs = full_compile();
  std::vector<Job> jobs;
  for (std::size_t i = 0; i < sample.size(); ++i) {
    jobs.push_back({sample[i], 90});
    if (all_archs || i % 2 == 0) {
      jobs.push_back({sample[i], 80});
    }
  }
  for (const auto& v : variants_the_profiles_name()) {
    if (std::find(sample.begin(), sample.end(), v) == sample.end()) {
      jobs.push_back({v, 90});
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

#else
TEST(NvrtcDecodeCompile, NeedsTheCudaToolkit) {
  GTEST_SKIP() << "built without the CUDA Toolkit: no NVRTC to test";
}
#endif
