// The CUDA backend (cuda_backend.h): modules compiled by NvrtcCompiler are loaded with
// cudaLibraryLoadData and launched with cudaLaunchKernel on the backend's stream; timing uses
// events on that stream after an L2 flush (a memset of exactly the device's L2 size).
#include "src/backends/cuda/cuda_backend.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include "src/backends/cuda/cuda_check.h"
#include "src/backends/cuda/decode_launch.h"
#include "src/backends/cuda/embedded_kernels.h"
#include "src/backends/cuda/nvrtc_compiler.h"
#include "src/backends/cuda/prefill_launch.h"
#include "src/backends/cuda/cuda_devices.h"
#include "src/model/errors.h"

namespace attn {

namespace cuda {

TargetArch pick_target_arch(int cc, const std::vector<int>& supported) {
  if (std::find(supported.begin(), supported.end(), cc) != supported.end()) {
    return {cc, true};
  }
  int best = 0;
  for (int a : supported) {
    if (a <= cc) {
      best = std::max(best, a);
    }
  }
  if (best == 0) {
    throw DeviceUnavailable("NVRTC " + nvrtc_version() + " cannot generate code for sm_" +
                            std::to_string(cc) + " (oldest supported: sm_" +
                            std::to_string(supported.empty() ? 0 : supported.front()) + ")");
  }
  return {best, false};
}

std::vector<int> nvrtc_supported_archs() {
  int n = 0;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) {
    return {};
  }
  std::vector<int> archs(std::size_t(n), 0);
  if (nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) {
    return {};
  }
  std::sort(archs.begin(), archs.end());
  return archs;
}

namespace {
// The NVRTC request of one kernel file with a variant's defines, for one target.
CompileRequest kernel_compile_request(const char* file, std::vector<std::string> defines,
                                      std::string description, const TargetArch& target) {
  CompileRequest req;
  req.source_name = file;
  req.source = embedded_kernel(file);
  req.headers = embedded_kernel_headers();
  req.options = std::move(defines);
  req.arch = target.arch;
  req.cubin = target.cubin;
  req.description = std::move(description);
  return req;
}
} // namespace

CompileRequest decode_compile_request(const DecodeVariant& v, const TargetArch& target) {
  return kernel_compile_request("decode.cuh", v.defines(), v.describe(), target);
}

CompileRequest prefill_compile_request(const PrefillVariant& v, const TargetArch& target) {
  return kernel_compile_request("prefill.cuh", v.defines(), v.describe(), target);
}

int precompile_prefill(const std::vector<PrefillVariant>& variants, int cc) {
  const TargetArch target = pick_target_arch(cc, nvrtc_supported_archs());
  const NvrtcCompiler compiler(default_cache_dir());
  std::atomic<std::size_t> next{0};
  std::atomic<int> failed{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < variants.size(); i = next++) {
      try {
        (void)compiler.compile(prefill_compile_request(variants[i], target));
      } catch (const std::exception&) {
        ++failed;
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < std::max(1u, std::thread::hardware_concurrency()); ++w) {
    pool.emplace_back(worker);
  }
  for (auto& t : pool) {
    t.join();
  }
  return failed.load();
}

int precompile_decode(const std::vector<DecodeVariant>& variants, int cc) {
  const TargetArch target = pick_target_arch(cc, nvrtc_supported_archs());
  const NvrtcCompiler compiler(default_cache_dir());
  std::atomic<std::size_t> next{0};
  std::atomic<int> failed{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < variants.size(); i = next++) {
      try {
        (void)compiler.compile(decode_compile_request(variants[i], target));
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

namespace {

// Device memory owned by one object; zero-byte requests still get a valid pointer.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    ATTN_CUDA_CHECK(cudaMalloc(&ptr_, std::max<std::size_t>(bytes, 16)));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) {
      cudaFree(ptr_);
    }
  }
  [[nodiscard]] void* get() const { return ptr_; }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }
  void upload(const void* src, std::size_t bytes) {
    if (bytes > 0) {
      ATTN_CUDA_CHECK(cudaMemcpy(ptr_, src, bytes, cudaMemcpyHostToDevice));
    }
  }

private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

class Event {
public:
  Event() { ATTN_CUDA_CHECK(cudaEventCreate(&e_)); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { cudaEventDestroy(e_); }
  [[nodiscard]] cudaEvent_t get() const { return e_; }

private:
  cudaEvent_t e_ = nullptr;
};

// A loaded compilation of decode.cuh: the library and its entry points.
struct Module {
  cudaLibrary_t lib = nullptr;
  cudaKernel_t main = nullptr;
  cudaKernel_t reduce = nullptr;
  CompileResult compiled;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  ~Module() {
    if (lib != nullptr) {
      cudaLibraryUnload(lib);
    }
  }
};

class CudaBackend;

// A prefill problem resident on the device with one variant of prefill.cuh (defined below the
// backend).
std::unique_ptr<PreparedRun> make_prefill_run(CudaBackend& be, const Problem& pr,
                                              const PrefillVariant& v,
                                              std::shared_ptr<const Module> mod);

// What both kernel families' runs share: out and lse with their poison images, one synchronous
// launch, download, and event timing with the L2 flush. A family adds its inputs and launch().
class DeviceRun : public PreparedRun {
public:
  void poison_outputs() override;
  void run() override;
  [[nodiscard]] RunOutput download() override;
  [[nodiscard]] TimingResult time(const TimingOptions& opt) override;

protected:
  // Allocates out [rows, num_heads, head_dim] and lse [rows, num_heads] on the backend's device.
  DeviceRun(CudaBackend& be, const Problem& pr);
  // Enqueues the family's kernels on the backend's stream.
  virtual void launch() = 0;

  CudaBackend& be_;
  DeviceBuffer out_, lse_;
  HostTensor out_poison_;
  std::vector<float> lse_poison_;
};

class CudaRun final : public DeviceRun {
public:
  CudaRun(CudaBackend& be, const Problem& pr, const DecodeVariant& v,
          std::shared_ptr<const Module> mod);

private:
  void launch() override;

  DecodeVariant v_;
  DecodeLaunch shape_;
  std::shared_ptr<const Module> mod_;
  DeviceBuffer q_, k_, v_cache_, tables_, lens_, ws_;
  // Kernel arguments, kept alive for cudaLaunchKernel's pointer array.
  void* out_ptr_ = nullptr;
  void* lse_ptr_ = nullptr;
  void* q_ptr_ = nullptr;
  void* k_ptr_ = nullptr;
  void* v_ptr_ = nullptr;
  void* tables_ptr_ = nullptr;
  void* lens_ptr_ = nullptr;
  void* ws_m_ = nullptr;
  void* ws_l_ = nullptr;
  void* ws_o_ = nullptr;
  int num_heads_ = 0;
  int num_kv_heads_ = 0;
  int max_blocks_ = 0;
  float scale_ = 0.0f;
  float softcap_ = 0.0f;
  int causal_ = 1;
  int window_left_ = -1;
  int window_right_ = -1;
  int max_parts_ = 0;
};

class CudaBackend final : public Backend {
public:
  CudaBackend(int index, DeviceInfo info)
      : device_(index), info_(std::move(info)), compiler_(default_cache_dir()) {
    ATTN_CUDA_CHECK(cudaSetDevice(device_));
    int v = 0;
    ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlock, device_));
    lim_.smem_per_block = v;
    ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxThreadsPerBlock, device_));
    lim_.max_threads_per_block = v;
    ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxRegistersPerBlock, device_));
    lim_.regs_per_block = v;
    ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxGridDimY, device_));
    lim_.max_grid_y = v;
    ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxGridDimZ, device_));
    lim_.max_grid_z = v;
    read_prefill_limits();
    target_ = pick_target_arch(info_.cc_major * 10 + info_.cc_minor, nvrtc_supported_archs());
    ATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  ~CudaBackend() override {
    modules_.clear();
    flush_ = DeviceBuffer();
    if (stream_ != nullptr) {
      cudaStreamDestroy(stream_);
    }
  }

  [[nodiscard]] const DeviceInfo& info() const override { return info_; }

  [[nodiscard]] std::vector<KernelConfig> config_space(Family f,
                                                       const AttnParams& p) const override {
    if (f == Family::prefill) {
      return prefill_config_space(p);
    }
    return decode_config_space(f, p);
  }

  [[nodiscard]] std::optional<std::string> can_run(const KernelConfig& cfg,
                                                   const Problem& pr) const override {
    if (cfg.family == Family::prefill) {
      return prefill_can_run(cfg, pr);
    }
    if (auto why = decode_static_can_run(cfg, pr, lim_)) {
      return why;
    }
    const DecodeVariant v = decode_variant(cfg, pr.params);
    return compiled_can_run([&] { return module(v); },
                            [&](const std::string& kernel) {
                              return kernel == kDecodeReduceEntry ? kReduceThreads : v.threads;
                            },
                            lim_.regs_per_block, /*reject_spills=*/false);
  }

  // Why a variant's compiled kernels cannot run here (no compile, too many registers for its
  // block, local memory when reject_spills), or nullopt; `load` compiles through the cache.
  [[nodiscard]] static std::optional<std::string>
  compiled_can_run(const std::function<std::shared_ptr<const Module>()>& load,
                   const std::function<int(const std::string&)>& threads_of, int regs_per_block,
                   bool reject_spills) {
    std::shared_ptr<const Module> mod;
    try {
      mod = load();
    } catch (const CompileError& e) {
      const std::string msg = e.what();
      return "does not compile: " + msg.substr(0, msg.find('\n'));
    }
    for (const auto& k : mod->compiled.kernels) {
      const int threads = threads_of(k.name);
      if (int64_t(k.registers) * threads > regs_per_block) {
        return k.name + " uses " + std::to_string(k.registers) + " registers per thread; " +
               std::to_string(threads) + " threads exceed the device's " +
               std::to_string(regs_per_block) + " registers per block";
      }
      if (reject_spills && (k.stack_bytes > 0 || k.spill_store_bytes > 0)) {
        return k.name + " spills to local memory (" + std::to_string(k.spill_store_bytes) +
               " bytes of spill stores)";
      }
    }
    return std::nullopt;
  }

  // Compiles `req` (through the disk cache) and loads it once per backend under `key`; `bind`
  // looks up the module's kernels and sets their attributes.
  [[nodiscard]] std::shared_ptr<const Module>
  load_module(const std::string& key, CompileRequest req,
              const std::function<void(Module&)>& bind) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = modules_.find(key); it != modules_.end()) {
      return it->second;
    }
    req.description += " for " + info_.id + " (" + info_.name + ")";
    auto mod = std::make_shared<Module>();
    mod->compiled = compiler_.compile(req);
    ATTN_CUDA_CHECK(cudaSetDevice(device_));
    ATTN_CUDA_CHECK(cudaLibraryLoadData(&mod->lib, mod->compiled.image.data(), nullptr, nullptr, 0,
                                        nullptr, nullptr, 0));
    bind(*mod);
    modules_[key] = mod;
    return mod;
  }

  [[nodiscard]] std::unique_ptr<PreparedRun> prepare(const Problem& pr,
                                                     const KernelConfig& cfg) override {
    if (auto why = can_run(cfg, pr)) {
      throw InputError(cfg.key() + " cannot run on " + info_.id + ": " + *why);
    }
    if (cfg.family == Family::prefill) {
      const PrefillVariant pv = prefill_variant(cfg, pr.params);
      return make_prefill_run(*this, pr, pv, prefill_module(pv));
    }
    const DecodeVariant v = decode_variant(cfg, pr.params);
    return std::make_unique<CudaRun>(*this, pr, v, module(v));
  }

  // Compiles (through the disk cache) and loads a variant once per backend.
  [[nodiscard]] std::shared_ptr<const Module> module(const DecodeVariant& v) const {
    return load_module(v.describe(), decode_compile_request(v, target_), [&](Module& mod) {
      ATTN_CUDA_CHECK(cudaLibraryGetKernel(&mod.main, mod.lib, decode_entry(v.family)));
      if (v.family == Family::decode_v2) {
        ATTN_CUDA_CHECK(cudaLibraryGetKernel(&mod.reduce, mod.lib, kDecodeReduceEntry));
      }
    });
  }

  // ---- prefill (kernels/prefill.cuh) ----

  void read_prefill_limits() {
    int v = 0;
    plim_.cc = info_.cc_major * 10 + info_.cc_minor;
    ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_));
    plim_.smem_optin = v;
    plim_.max_threads_per_block = lim_.max_threads_per_block;
    plim_.regs_per_block = lim_.regs_per_block;
    plim_.max_grid_y = lim_.max_grid_y;
    ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxGridDimX, device_));
    plim_.max_grid_x = v;
  }

  [[nodiscard]] std::optional<std::string> prefill_can_run(const KernelConfig& cfg,
                                                           const Problem& pr) const {
    if (auto why = prefill_static_can_run(cfg, pr, plim_)) {
      return why;
    }
    const PrefillVariant v = prefill_variant(cfg, pr.params);
    return compiled_can_run([&] { return prefill_module(v); },
                            [&](const std::string&) { return v.threads(); }, plim_.regs_per_block,
                            /*reject_spills=*/true);
  }

  // Compiles and loads a prefill variant once per backend and opts it into the dynamic shared
  // memory it needs (above the 48 KiB default).
  [[nodiscard]] std::shared_ptr<const Module> prefill_module(const PrefillVariant& v) const {
    return load_module(v.describe(), prefill_compile_request(v, target_), [&](Module& mod) {
      ATTN_CUDA_CHECK(cudaLibraryGetKernel(&mod.main, mod.lib, kPrefillEntry));
      ATTN_CUDA_CHECK(cudaKernelSetAttributeForDevice(mod.main,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      int(prefill_smem_bytes(v)), device_));
    });
  }

  [[nodiscard]] int device() const { return device_; }
  [[nodiscard]] cudaStream_t stream() const { return stream_; }

  // Overwrites the whole L2 so that the next launch reads K/V from DRAM.
  void flush_l2() {
    if (info_.l2_bytes <= 0) {
      return;
    }
    if (flush_.get() == nullptr) {
      flush_ = DeviceBuffer(std::size_t(info_.l2_bytes));
    }
    ATTN_CUDA_CHECK(cudaMemsetAsync(flush_.get(), int(flush_value_++ & 0xff),
                                    std::size_t(info_.l2_bytes), stream_));
  }

private:
  int device_;
  DeviceInfo info_;
  CudaLimits lim_;
  CudaLimits plim_;
  TargetArch target_;
  NvrtcCompiler compiler_;
  cudaStream_t stream_ = nullptr;
  mutable std::mutex mu_;
  mutable std::map<std::string, std::shared_ptr<const Module>> modules_;
  DeviceBuffer flush_;
  unsigned flush_value_ = 0;
};

DeviceRun::DeviceRun(CudaBackend& be, const Problem& pr) : be_(be) {
  const AttnParams& p = pr.params;
  ATTN_CUDA_CHECK(cudaSetDevice(be_.device()));
  const int rows = pr.num_rows();
  out_poison_ = HostTensor(p.dtype, {rows, p.num_heads, p.head_dim});
  poison(out_poison_);
  lse_poison_.assign(std::size_t(rows) * p.num_heads, 0.0f);
  poison(lse_poison_);
  out_ = DeviceBuffer(out_poison_.data.size());
  lse_ = DeviceBuffer(lse_poison_.size() * sizeof(float));
}

CudaRun::CudaRun(CudaBackend& be, const Problem& pr, const DecodeVariant& v,
                 std::shared_ptr<const Module> mod)
    : DeviceRun(be, pr), v_(v), shape_(decode_launch(v, pr)), mod_(std::move(mod)) {
  const AttnParams& p = pr.params;
  q_ = DeviceBuffer(pr.query.data.size());
  q_.upload(pr.query.raw(), pr.query.data.size());
  k_ = DeviceBuffer(pr.key_cache.data.size());
  k_.upload(pr.key_cache.raw(), pr.key_cache.data.size());
  v_cache_ = DeviceBuffer(pr.value_cache.data.size());
  v_cache_.upload(pr.value_cache.raw(), pr.value_cache.data.size());
  tables_ = DeviceBuffer(pr.block_tables.size() * sizeof(int32_t));
  tables_.upload(pr.block_tables.data(), pr.block_tables.size() * sizeof(int32_t));
  lens_ = DeviceBuffer(pr.context_lens.size() * sizeof(int32_t));
  lens_.upload(pr.context_lens.data(), pr.context_lens.size() * sizeof(int32_t));
  if (shape_.reduce) {
    ws_ = DeviceBuffer(std::size_t(shape_.workspace_floats) * sizeof(float));
    const std::size_t parts = std::size_t(pr.batch) * p.num_heads * shape_.max_parts;
    auto* base = static_cast<float*>(ws_.get());
    ws_m_ = base;
    ws_l_ = base + parts;
    ws_o_ = base + 2 * parts;
  }
  out_ptr_ = out_.get();
  lse_ptr_ = lse_.get();
  q_ptr_ = q_.get();
  k_ptr_ = k_.get();
  v_ptr_ = v_cache_.get();
  tables_ptr_ = tables_.get();
  lens_ptr_ = lens_.get();
  num_heads_ = p.num_heads;
  num_kv_heads_ = p.num_kv_heads;
  max_blocks_ = pr.max_blocks_per_seq;
  scale_ = float(p.effective_scale());
  softcap_ = float(p.softcap);
  causal_ = p.causal ? 1 : 0;
  window_left_ = p.window_left;
  window_right_ = p.window_right;
  max_parts_ = shape_.max_parts;
}

void DeviceRun::poison_outputs() {
  ATTN_CUDA_CHECK(cudaSetDevice(be_.device()));
  ATTN_CUDA_CHECK(cudaMemcpyAsync(out_.get(), out_poison_.raw(), out_poison_.data.size(),
                                  cudaMemcpyHostToDevice, be_.stream()));
  ATTN_CUDA_CHECK(cudaMemcpyAsync(lse_.get(), lse_poison_.data(),
                                  lse_poison_.size() * sizeof(float), cudaMemcpyHostToDevice,
                                  be_.stream()));
  ATTN_CUDA_CHECK(cudaStreamSynchronize(be_.stream()));
}

void CudaRun::launch() {
  const dim3 grid(shape_.grid.x, shape_.grid.y, shape_.grid.z);
  const dim3 block(shape_.block.x, shape_.block.y, shape_.block.z);
  if (grid.x == 0 || grid.y == 0) {
    return; // an empty batch: nothing to compute
  }
  if (v_.family == Family::decode_v1) {
    void* args[] = {&out_ptr_,    &lse_ptr_,  &q_ptr_,     &k_ptr_,        &v_ptr_,
                    &tables_ptr_, &lens_ptr_, &num_heads_, &num_kv_heads_, &max_blocks_,
                    &scale_,      &softcap_,  &causal_,    &window_left_,  &window_right_};
    ATTN_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(mod_->main), grid, block, args,
                                     0, be_.stream()));
    return;
  }
  void* args[] = {&out_ptr_,    &lse_ptr_,  &q_ptr_,     &k_ptr_,        &v_ptr_,
                  &tables_ptr_, &lens_ptr_, &num_heads_, &num_kv_heads_, &max_blocks_,
                  &scale_,      &softcap_,  &causal_,    &window_left_,  &window_right_,
                  &ws_m_,       &ws_l_,     &ws_o_,      &max_parts_};
  ATTN_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(mod_->main), grid, block, args, 0,
                                   be_.stream()));
  const dim3 rgrid(shape_.reduce_grid.x, shape_.reduce_grid.y, shape_.reduce_grid.z);
  const dim3 rblock(shape_.reduce_block.x, shape_.reduce_block.y, shape_.reduce_block.z);
  void* rargs[] = {&out_ptr_, &lse_ptr_, &lens_ptr_,  &ws_m_,
                   &ws_l_,    &ws_o_,    &num_heads_, &max_parts_};
  ATTN_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(mod_->reduce), rgrid, rblock,
                                   rargs, std::size_t(shape_.reduce_smem), be_.stream()));
}

void DeviceRun::run() {
  ATTN_CUDA_CHECK(cudaSetDevice(be_.device()));
  launch();
  ATTN_CUDA_CHECK(cudaStreamSynchronize(be_.stream()));
  ATTN_CUDA_CHECK(cudaGetLastError());
}

RunOutput DeviceRun::download() {
  ATTN_CUDA_CHECK(cudaSetDevice(be_.device()));
  RunOutput r;
  r.out = HostTensor(out_poison_.dtype, out_poison_.shape);
  r.lse.assign(lse_poison_.size(), 0.0f);
  ATTN_CUDA_CHECK(cudaMemcpyAsync(r.out.raw(), out_.get(), r.out.data.size(),
                                  cudaMemcpyDeviceToHost, be_.stream()));
  ATTN_CUDA_CHECK(cudaMemcpyAsync(r.lse.data(), lse_.get(), r.lse.size() * sizeof(float),
                                  cudaMemcpyDeviceToHost, be_.stream()));
  ATTN_CUDA_CHECK(cudaStreamSynchronize(be_.stream()));
  return r;
}

TimingResult DeviceRun::time(const TimingOptions& opt) {
  ATTN_CUDA_CHECK(cudaSetDevice(be_.device()));
  Event start;
  Event stop;
  auto one_rep = [&]() {
    if (opt.flush_cache) {
      be_.flush_l2();
    }
    ATTN_CUDA_CHECK(cudaEventRecord(start.get(), be_.stream()));
    launch();
    ATTN_CUDA_CHECK(cudaEventRecord(stop.get(), be_.stream()));
    ATTN_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0.0f;
    ATTN_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    return double(ms) * 1e-3;
  };
  auto warm_one = [&]() {
    launch();
    ATTN_CUDA_CHECK(cudaStreamSynchronize(be_.stream()));
  };
  return measure(one_rep, warm_one, opt,
                 opt.flush_cache ? "cuda-events, L2 flushed" : "cuda-events, L2 warm");
}

// ---- prefill runs
// --------------------------------------------------------------------------------

class PrefillRun final : public DeviceRun {
public:
  PrefillRun(CudaBackend& be, const Problem& pr, const PrefillVariant& v,
             std::shared_ptr<const Module> mod)
      : DeviceRun(be, pr), shape_(prefill_launch(v, pr)), mod_(std::move(mod)) {
    const AttnParams& p = pr.params;
    auto upload = [](DeviceBuffer& buf, const void* src, std::size_t bytes) {
      buf = DeviceBuffer(bytes);
      buf.upload(src, bytes);
    };
    upload(q_, pr.query.raw(), pr.query.data.size());
    upload(k_, pr.key_cache.raw(), pr.key_cache.data.size());
    upload(v_, pr.value_cache.raw(), pr.value_cache.data.size());
    upload(tables_, pr.block_tables.data(), pr.block_tables.size() * sizeof(int32_t));
    upload(cu_q_, pr.cu_seqlens_q.data(), pr.cu_seqlens_q.size() * sizeof(int32_t));
    upload(cu_k_, pr.cu_seqlens_k.data(), pr.cu_seqlens_k.size() * sizeof(int32_t));
    upload(map_, shape_.tile_map.data(), shape_.tile_map.size() * sizeof(int32_t));
    ptrs_ = {out_.get(),    lse_.get(),  q_.get(),    k_.get(),  v_.get(),
             tables_.get(), cu_q_.get(), cu_k_.get(), map_.get()};
    num_heads_ = p.num_heads;
    num_kv_heads_ = p.num_kv_heads;
    max_blocks_ = pr.max_blocks_per_seq;
    scale_ = float(p.effective_scale());
    softcap_ = float(p.softcap);
    causal_ = p.causal ? 1 : 0;
    window_left_ = p.window_left;
    window_right_ = p.window_right;
  }

private:
  void launch() override {
    if (shape_.grid.x == 0 || shape_.grid.y == 0) {
      return; // no query rows: nothing to compute
    }
    const dim3 grid(shape_.grid.x, shape_.grid.y, shape_.grid.z);
    const dim3 block(shape_.block.x, shape_.block.y, shape_.block.z);
    void* args[] = {&ptrs_[0], &ptrs_[1], &ptrs_[2], &ptrs_[3],     &ptrs_[4],      &ptrs_[5],
                    &ptrs_[6], &ptrs_[7], &ptrs_[8], &num_heads_,   &num_kv_heads_, &max_blocks_,
                    &scale_,   &softcap_, &causal_,  &window_left_, &window_right_};
    ATTN_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(mod_->main), grid, block, args,
                                     std::size_t(shape_.smem), be_.stream()));
  }

  PrefillLaunch shape_;
  std::shared_ptr<const Module> mod_;
  DeviceBuffer q_, k_, v_, tables_, cu_q_, cu_k_, map_;
  // Kernel arguments in prefill.cuh's order, kept alive for cudaLaunchKernel's pointer array:
  // out, lse, q, k_cache, v_cache, block_tables, cu_seqlens_q, cu_seqlens_k, tile_map.
  std::array<void*, 9> ptrs_{};
  int num_heads_ = 0;
  int num_kv_heads_ = 0;
  int max_blocks_ = 0;
  float scale_ = 0.0f;
  float softcap_ = 0.0f;
  int causal_ = 1;
  int window_left_ = -1;
  int window_right_ = -1;
};

std::unique_ptr<PreparedRun> make_prefill_run(CudaBackend& be, const Problem& pr,
                                              const PrefillVariant& v,
                                              std::shared_ptr<const Module> mod) {
  return std::make_unique<PrefillRun>(be, pr, v, std::move(mod));
}

} // namespace

CopyBandwidth measure_copy_bandwidth(int device, int64_t buffer_bytes, const TimingOptions& opt) {
  ATTN_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  ATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } guard{stream};
  DeviceBuffer src{std::size_t(buffer_bytes)};
  DeviceBuffer dst{std::size_t(buffer_bytes)};
  ATTN_CUDA_CHECK(cudaMemsetAsync(src.get(), 1, std::size_t(buffer_bytes), stream));
  Event start;
  Event stop;
  auto copy = [&]() {
    ATTN_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), std::size_t(buffer_bytes),
                                    cudaMemcpyDeviceToDevice, stream));
  };
  auto one_rep = [&]() {
    ATTN_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    copy();
    ATTN_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    ATTN_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0.0f;
    ATTN_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    return double(ms) * 1e-3;
  };
  auto warm_one = [&]() {
    copy();
    ATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  };
  CopyBandwidth r;
  r.buffer_bytes = buffer_bytes;
  r.timing = measure(one_rep, warm_one, opt, "cuda-events, cudaMemcpyAsync device to device");
  r.bytes_per_s = r.timing.median_s > 0 ? 2.0 * double(buffer_bytes) / r.timing.median_s : 0.0;
  return r;
}

} // namespace cuda

std::unique_ptr<Backend> make_cuda_backend(int index) {
  std::string why;
  const std::vector<DeviceInfo> devices = cuda_devices(why);
  if (devices.empty()) {
    throw DeviceUnavailable(why);
  }
  if (index < 0 || index >= int(devices.size())) {
    throw DeviceUnavailable("no CUDA device " + std::to_string(index) + ": this machine has " +
                            std::to_string(devices.size()) +
                            " (cuda:0 to cuda:" + std::to_string(devices.size() - 1) + ")");
  }
  return std::make_unique<cuda::CudaBackend>(index, devices[std::size_t(index)]);
}

} // namespace attn
