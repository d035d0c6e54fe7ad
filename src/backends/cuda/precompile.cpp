// One thread pool compiles the requests of either kernel family (see precompile.h); a failure
// only counts, since the backend compiles the variant again and can_run reports why.
#include "src/backends/cuda/precompile.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>

#include "src/backends/cuda/cuda_backend.h"

namespace attn::cuda {

int precompile(const std::vector<CompileRequest>& requests,
               const std::function<void(int done)>& progress) {
  const NvrtcCompiler compiler(default_cache_dir());
  std::atomic<std::size_t> next{0};
  std::atomic<int> failed{0};
  std::mutex progress_mu;
  int done = 0;
  auto worker = [&] {
    for (std::size_t i = next++; i < requests.size(); i = next++) {
      try {
        (void)compiler.compile(requests[i]);
      } catch (const std::exception&) {
        ++failed;
      }
      // One report at a time, in order, so a progress line never goes backwards.
      const std::lock_guard<std::mutex> lock(progress_mu);
      ++done;
      if (progress) {
        progress(done);
      }
    }
  };
  const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < std::min<std::size_t>(n, std::max<std::size_t>(requests.size(), 1));
       ++w) {
    pool.emplace_back(worker);
  }
  for (auto& t : pool) {
    t.join();
  }
  return failed.load();
}

int precompile_decode(const std::vector<DecodeVariant>& variants, int cc) {
  const TargetArch target = pick_target_arch(cc, nvrtc_supported_archs());
  std::vector<CompileRequest> requests;
  for (const auto& v : variants) {
    requests.push_back(decode_compile_request(v, target));
  }
  return precompile(requests);
}

int precompile_prefill(const std::vector<PrefillVariant>& variants, int cc) {
  const TargetArch target = pick_target_arch(cc, nvrtc_supported_archs());
  std::vector<CompileRequest> requests;
  for (const auto& v : variants) {
    requests.push_back(prefill_compile_request(v, target));
  }
  return precompile(requests);
}

} // namespace attn::cuda
