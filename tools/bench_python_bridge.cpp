// What the Python bridge (--kernels python:MODULE) adds to every call, so users know the smallest
// calls it can time meaningfully. Measured in one run on one small decode call:
//   baseline   an empty C++ function through the same host timing path;
//   bridge     a Python kernel that returns at once (tools/bridge_bench_kernels.py), on the same
//              buffers every call (tensors wrapped once, as when attn-tune times a configuration);
//   wrapping   the same, alternating two sets of buffers, so that every call wraps its nine
//              tensors through DLPack again;
//   torch      python:attn_tune_torch's decode on the same call, for scale.
// Usage: bench_python_bridge [--reps N]. Prints microseconds per call (median of 7 batches).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "src/backends/plugin/plugin_library.h"
#include "src/model/errors.h"
#include "src/model/problem.h"
#include "src/model/problem_gen.h"

namespace {

using Clock = std::chrono::steady_clock;

// Median over 7 batches of `reps` calls: microseconds per call.
double per_call_us(const std::function<void(int)>& call, int reps) {
  std::vector<double> batches;
  for (int b = 0; b < 7; ++b) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) {
      call(i);
    }
    batches.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / reps);
  }
  std::sort(batches.begin(), batches.end());
  return batches[3];
}

struct Buffers {
  attn::HostTensor out;
  std::vector<float> lse;
  attn::PluginHostArrays arrays; // what call's length pointers point into (moves keep the buffers)
  attn_call call{};
};

Buffers buffers_for(const attn::Problem& pr) {
  Buffers b;
  b.out =
      attn::HostTensor(pr.params.dtype, {pr.num_rows(), pr.params.num_heads, pr.params.head_dim});
  b.lse.assign(std::size_t(pr.num_rows()) * std::size_t(pr.params.num_heads), 0.0f);
  b.call = attn::plugin_call_shape(pr, attn::Family::decode_v1, attn::KvLayout::HND, 1, b.arrays);
  b.call.query = pr.query.raw();
  b.call.key_cache = pr.key_cache.raw();
  b.call.value_cache = pr.value_cache.raw();
  b.call.block_tables = pr.block_tables.data();
  b.call.context_lens = pr.context_lens.data();
  b.call.out = b.out.raw();
  b.call.lse = b.lse.data();
  return b;
}

} // namespace

int main(int argc, char** argv) {
  int reps = 2000;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0) {
      reps = std::max(1, std::atoi(argv[i + 1]));
    }
  }
  // The no-op kernels live next to this file's source.
  const std::string tools = ATTN_TOOLS_DIR;
  const char* old = std::getenv("PYTHONPATH");
  std::string path = tools;
  if (old != nullptr && *old != '\0') {
    path += ':';
    path += old;
  }
  setenv("PYTHONPATH", path.c_str(), 1);
  try {
    attn::AttnParams p;
    p.dtype = attn::DType::f16;
    p.num_heads = 8;
    p.num_kv_heads = 2;
    p.head_dim = 64;
    p.block_size = 16;
    const attn::Problem pr = attn::make_decode_problem(p, {64, 64}, attn::GenOptions{});
    const attn::Problem pr2 = attn::make_decode_problem(p, {64, 64}, attn::GenOptions{.seed = 2});
    Buffers a = buffers_for(pr);
    Buffers b = buffers_for(pr2);
    const attn::KernelConfig cfg{attn::Family::decode_v1, {}};

    volatile int sink = 0;
    const double baseline = per_call_us([&](int i) { sink = sink + i; }, reps);

    auto noop = attn::PluginLibrary::open("python:bridge_bench_kernels");
    const double bridge =
        per_call_us([&](int) { noop->run(cfg, a.call, nullptr, 0, nullptr); }, reps);
    const double wrapping = per_call_us(
        [&](int i) { noop->run(cfg, (i % 2 ? b : a).call, nullptr, 0, nullptr); }, reps);
    noop.reset();

    auto torch = attn::PluginLibrary::open("python:attn_tune_torch");
    const double torch_us = per_call_us([&](int) { torch->run(cfg, a.call, nullptr, 0, nullptr); },
                                        std::max(1, reps / 20));

    std::printf("decode call: %s\n", pr.describe().c_str());
    std::printf("%-44s %10s\n", "per call", "us");
    std::printf("%-44s %10.3f\n", "baseline: empty C++ function", baseline);
    std::printf("%-44s %10.2f\n", "bridge: no-op Python kernel, same buffers", bridge);
    std::printf("%-44s %10.2f\n", "bridge: no-op, new tensors every call", wrapping);
    std::printf("%-44s %10.2f\n", "python:attn_tune_torch decode_v1", torch_us);
    std::printf("bridge overhead: %.1f us per call (%.1f us when the tensors are wrapped anew)\n",
                bridge - baseline, wrapping - baseline);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_python_bridge: %s\n", e.what());
    return 2;
  }
  return 0;
}
