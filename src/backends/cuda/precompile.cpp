// One thread pool compiles the requests of either kernel family (see precompile.h); a failure
// only counts, since the backend compiles the variant again and can_run reports why.
#include "src/backends/cuda/precompile.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <thread>

#include "src/backends/cuda/cuda_backend.h"
#include "src/backends/cuda/nvrtc_compiler.h"

namespace attn::cuda {

namespace {

// Compiles request_of(i, target) for every i < count on all CPU cores into the default disk
// cache; returns how many threw.
int precompile(std::size_t count, int cc,
               const std::function<CompileRequest(std::size_t, const TargetArch&)>& request_of) {
  const TargetArch target = pick_target_arch(cc, nvrtc_supported_archs());
  const NvrtcCompiler compiler(default_cache_dir());
  std::atomic<std::size_t> next{0};
  std::atomic<int> failed{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < count; i = next++) {
      try {
        (void)compiler.compile(request_of(i, target));
      } catch (const std::exception&) {
        ++failed;
      }
    }
  };
  const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < n; ++w) {
    pool.emplace_back(worker);
  }
  for (auto& t : pool) {
    t.join();
  }
  return failed.load();
}

} // namespace

int precompile_decode(const std::vector<DecodeVariant>& variants, int cc) {
  return precompile(variants.size(), cc, [&](std::size_t i, const TargetArch& target) {
    return decode_compile_request(variants[i], target);
  });
}

int precompile_prefill(const std::vector<PrefillVariant>& variants, int cc) {
  return precompile(variants.size(), cc, [&](std::size_t i, const TargetArch& target) {
    return prefill_compile_request(variants[i], target);
  });
}

} // namespace attn::cuda
