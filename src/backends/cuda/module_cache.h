// The compiled kernels of one device: each variant of either kernel family compiled (through the
// disk cache) and loaded once, and why a variant's compiled kernels cannot run there.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <cuda_runtime_api.h>

#include "src/backends/cuda/cuda_backend.h"
#include "src/backends/cuda/nvrtc_compiler.h"

namespace attn::cuda {

// A loaded compilation of one kernel file: the library and its entry points.
struct Module {
  cudaLibrary_t lib = nullptr;
  cudaKernel_t main = nullptr;
  cudaKernel_t reduce = nullptr; // decode_v2's reduce kernel; null otherwise
  CompileResult compiled;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  ~Module();
};

// What loading and checking one variant takes, so that a single cache and a single resources
// check serve both kernel families; module_spec() builds it from a family's variant.
struct ModuleSpec {
  CompileRequest request; // its description (the variant) is the cache key
  // Looks up the module's entry points and sets their attributes for `device`.
  std::function<void(Module& mod, int device)> bind;
  // Threads per block that each entry point is launched with, by kernel name.
  std::function<int(const std::string& kernel)> threads_of;
  // Refuse kernels that use local memory (spill stores or a stack frame): prefill only.
  bool reject_spills = false;
};
[[nodiscard]] ModuleSpec module_spec(const DecodeVariant& v, const TargetArch& target);
[[nodiscard]] ModuleSpec module_spec(const PrefillVariant& v, const TargetArch& target);

class ModuleCache {
public:
  // `device_label` ("cuda:0 (NVIDIA H100)") is added to compile errors.
  ModuleCache(int device, std::string device_label);

  // Compiles (through the disk cache) and loads `spec` once per cache; throws CompileError.
  [[nodiscard]] std::shared_ptr<const Module> get(const ModuleSpec& spec) const;

  // Why `spec`'s compiled kernels cannot run on a device with `regs_per_block` registers per
  // block (no compile, too many registers for the block, local memory when refused), or nullopt.
  [[nodiscard]] std::optional<std::string> can_run(const ModuleSpec& spec,
                                                   int regs_per_block) const;

  // Unloads every module (the backend does so before it destroys its stream).
  void clear();

private:
  int device_;
  std::string label_;
  NvrtcCompiler compiler_;
  mutable std::mutex mu_;
  mutable std::map<std::string, std::shared_ptr<const Module>> modules_;
};

} // namespace attn::cuda
