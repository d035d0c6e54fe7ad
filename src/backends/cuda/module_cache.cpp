// Modules compiled by NvrtcCompiler are loaded with cudaLibraryLoadData (see module_cache.h);
// a family's module_spec says which entry points to look up and how its kernels are launched.
#include "src/backends/cuda/module_cache.h"

#include <cstdint>
#include <utility>

#include "src/backends/cuda/cuda_check.h"

namespace attn::cuda {

Module::~Module() {
  if (lib != nullptr) {
    cudaLibraryUnload(lib);
  }
}

ModuleSpec module_spec(const DecodeVariant& v, const TargetArch& target) {
  ModuleSpec s;
  s.request = decode_compile_request(v, target);
  s.bind = [v](Module& mod, int /*device*/) {
    ATTN_CUDA_CHECK(cudaLibraryGetKernel(&mod.main, mod.lib, decode_entry(v.family)));
    if (v.family == Family::decode_v2) {
      ATTN_CUDA_CHECK(cudaLibraryGetKernel(&mod.reduce, mod.lib, kDecodeReduceEntry));
    }
  };
  s.threads_of = [threads = v.threads](const std::string& kernel) {
    return kernel == kDecodeReduceEntry ? kReduceThreads : threads;
  };
  s.reject_spills = false;
  return s;
}

ModuleSpec module_spec(const PrefillVariant& v, const TargetArch& target) {
  ModuleSpec s;
  s.request = prefill_compile_request(v, target);
  // The kernel is opted into the dynamic shared memory it needs (above the 48 KiB default).
  s.bind = [smem = int(prefill_smem_bytes(v))](Module& mod, int device) {
    ATTN_CUDA_CHECK(cudaLibraryGetKernel(&mod.main, mod.lib, kPrefillEntry));
    ATTN_CUDA_CHECK(cudaKernelSetAttributeForDevice(
        mod.main, cudaFuncAttributeMaxDynamicSharedMemorySize, smem, device));
  };
  s.threads_of = [threads = v.threads()](const std::string&) { return threads; };
  s.reject_spills = true;
  return s;
}

ModuleCache::ModuleCache(int device, std::string device_label)
    : device_(device), label_(std::move(device_label)), compiler_(default_cache_dir()) {}

std::shared_ptr<const Module> ModuleCache::get(const ModuleSpec& spec) const {
  const std::string& key = spec.request.description;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = modules_.find(key); it != modules_.end()) {
    return it->second;
  }
  CompileRequest req = spec.request;
  req.description += " for " + label_;
  auto mod = std::make_shared<Module>();
  mod->compiled = compiler_.compile(req);
  ATTN_CUDA_CHECK(cudaSetDevice(device_));
  ATTN_CUDA_CHECK(cudaLibraryLoadData(&mod->lib, mod->compiled.image.data(), nullptr, nullptr, 0,
                                      nullptr, nullptr, 0));
  spec.bind(*mod, device_);
  modules_[key] = mod;
  return mod;
}

std::optional<std::string> ModuleCache::can_run(const ModuleSpec& spec, int regs_per_block) const {
  std::shared_ptr<const Module> mod;
  try {
    mod = get(spec);
  } catch (const CompileError& e) {
    const std::string msg = e.what();
    return "does not compile: " + msg.substr(0, msg.find('\n'));
  }
  for (const auto& k : mod->compiled.kernels) {
    const int threads = spec.threads_of(k.name);
    if (int64_t(k.registers) * threads > regs_per_block) {
      return k.name + " uses " + std::to_string(k.registers) + " registers per thread; " +
             std::to_string(threads) + " threads exceed the device's " +
             std::to_string(regs_per_block) + " registers per block";
    }
    if (spec.reject_spills && (k.stack_bytes > 0 || k.spill_store_bytes > 0)) {
      return k.name + " spills to local memory (" + std::to_string(k.spill_store_bytes) +
             " bytes of spill stores)";
    }
  }
  return std::nullopt;
}

void ModuleCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  modules_.clear();
}

} // namespace attn::cuda
