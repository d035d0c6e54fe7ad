// Runs launch with cudaLaunchKernel on the backend's stream (see device_runs.h); timing uses
// events on that stream around a held, back-to-back call after a clean-read L2 flush (not held
// for a call that synchronises the host while it is enqueued).
#include "src/backends/cuda/device_runs.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <stdexcept>

#include "src/backends/cuda/cuda_check.h"
#include "src/backends/cuda/nvrtc_compiler.h"

namespace attn::cuda {

namespace {
// Long enough for any host to enqueue one rep, short enough that a stuck one surfaces quickly.
constexpr unsigned long long kHoldTimeoutNs = 2'000'000'000ull;
// The first probe of whether a call synchronises the host (synchronises_while_enqueued): far
// above the enqueue time of any call that does not; only a call that outlasts it waits for the
// full timeout as well, in the second probe.
constexpr unsigned long long kHoldProbeNs = 200'000'000ull;
} // namespace

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  ATTN_CUDA_CHECK(cudaMalloc(&ptr_, std::max<std::size_t>(bytes, 16)));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) {
    cudaFree(ptr_);
  }
}

void DeviceBuffer::upload(const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes > 0) {
    ATTN_CUDA_CHECK(cudaMemcpyAsync(ptr_, src, bytes, cudaMemcpyHostToDevice, stream));
    ATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
}

Event::Event() { ATTN_CUDA_CHECK(cudaEventCreate(&e_)); }

Event::~Event() { cudaEventDestroy(e_); }

DeviceStream::DeviceStream(int device, int64_t l2_bytes, const std::string& uuid, TargetArch target)
    : device_(device), l2_bytes_(l2_bytes), target_(target), nvml_(uuid) {
  ATTN_CUDA_CHECK(cudaSetDevice(device_));
  ATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_));
}

DeviceStream::~DeviceStream() {
  flush_ = DeviceBuffer();
  sink_ = DeviceBuffer();
  if (host_flags_ != nullptr) {
    cudaFreeHost(host_flags_);
  }
  if (helpers_ != nullptr) {
    cudaLibraryUnload(helpers_);
  }
  if (stream_ != nullptr) {
    cudaStreamDestroy(stream_);
  }
}

void DeviceStream::load_helpers() {
  if (helpers_ != nullptr) {
    return;
  }
  const NvrtcCompiler compiler(default_cache_dir());
  const CompileResult c = compiler.compile(timing_helpers_compile_request(target_));
  ATTN_CUDA_CHECK(
      cudaLibraryLoadData(&helpers_, c.image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  ATTN_CUDA_CHECK(cudaLibraryGetKernel(&flush_kernel_, helpers_, kL2FlushEntry));
  ATTN_CUDA_CHECK(cudaLibraryGetKernel(&hold_kernel_, helpers_, kHoldStreamEntry));
  // Twice the L2, as nvbench's users advise against a flush of exactly the L2 size: the L2's
  // replacement is not strict LRU over one address range, so a single L2-sized pass can leave
  // lines of the timed kernel behind.
  const auto bytes = std::size_t(std::max<int64_t>(l2_bytes_, 0)) * 2;
  flush_ = DeviceBuffer(bytes);
  sink_ = DeviceBuffer(sizeof(unsigned));
  ATTN_CUDA_CHECK(cudaMemsetAsync(flush_.get(), 0, bytes, stream_));
  ATTN_CUDA_CHECK(cudaMemsetAsync(sink_.get(), 0, sizeof(unsigned), stream_));
  ATTN_CUDA_CHECK(
      cudaHostAlloc(reinterpret_cast<void**>(&host_flags_), 2 * sizeof(int), cudaHostAllocMapped));
  ATTN_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_flags_), host_flags_, 0));
  host_flags_[0] = 0;
  host_flags_[1] = 0;
  // The memset left the buffer's lines dirty in the L2; one pass now writes them back, so that
  // every later flush brings in clean lines only.
  flush_l2();
  // One hold, released before it starts: with lazy module loading (the CUDA 12+ default) a
  // kernel is loaded on its first launch, which must not happen while a hold kernel spins.
  hold(kHoldTimeoutNs);
  release();
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void DeviceStream::flush_l2() {
  if (flush_.bytes() < 16) {
    return;
  }
  const void* buf = flush_.get();
  unsigned long long n16 = flush_.bytes() / 16;
  unsigned never = 0xffffffffu; // the buffer holds zeros, whose XOR is 0
  void* sink = sink_.get();
  void* args[] = {&buf, &n16, &never, &sink};
  ATTN_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(flush_kernel_),
                                   dim3(unsigned(sm_count_) * 4), dim3(256), args, 0, stream_));
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void DeviceStream::hold(unsigned long long timeout_ns) {
  std::atomic_ref<int>(host_flags_[0]).store(0, std::memory_order_release);
  std::atomic_ref<int>(host_flags_[1]).store(0, std::memory_order_release);
  int* release = dev_flags_;
  int* timed_out = dev_flags_ + 1;
  void* args[] = {&release, &timed_out, &timeout_ns};
  ATTN_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(hold_kernel_), dim3(1), dim3(1),
                                   args, 0, stream_));
}

void DeviceStream::release() {
  std::atomic_ref<int>(host_flags_[0]).store(1, std::memory_order_release);
}

bool DeviceStream::hold_timed_out() const {
  return std::atomic_ref<int>(host_flags_[1]).load(std::memory_order_acquire) != 0;
}

TimingResult DeviceStream::time(const std::function<void()>& enqueue, const TimingOptions& opt,
                                const std::string& what) {
  ATTN_CUDA_CHECK(cudaSetDevice(device_));
  load_helpers();
  Event start;
  Event stop;
  std::vector<ClockSample> samples;
  auto last_sample = std::chrono::steady_clock::time_point::min();
  // Warm-up calls are enqueued in batches that grow until one takes a millisecond, so that the
  // GPU runs back to back and does not idle between tiny kernels while the host synchronises.
  int batch = 1;
  auto warm_one = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < batch; ++i) {
      enqueue();
    }
    ATTN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1) && batch < 1024) {
      batch *= 2;
    }
  };
  // The timed call of one rep: the L2 flush (when asked, synchronised), then start event, the
  // call, stop event. Held (hold_ns > 0): the hold kernel keeps the stream from starting until
  // the whole call is enqueued, so a call of several launches (decode_v2 and its reduce) runs
  // back to back between the events. Returns the seconds between the events and whether the
  // hold gave up before the host released it.
  auto timed_call = [&](unsigned long long hold_ns) -> std::pair<double, bool> {
    if (opt.flush_cache) {
      flush_l2();
    }
    if (hold_ns > 0) {
      hold(hold_ns);
    }
    ATTN_CUDA_CHECK(cudaEventRecord(start.get(), stream_));
    enqueue();
    ATTN_CUDA_CHECK(cudaEventRecord(stop.get(), stream_));
    if (hold_ns > 0) {
      release();
    }
    ATTN_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0.0f;
    ATTN_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    return {double(ms) * 1e-3, hold_ns > 0 && hold_timed_out()};
  };
  // The call once before anything is held, for the same lazy-loading reason (a warm-up of zero
  // calls and zero seconds would otherwise first launch its kernels behind a spinning hold).
  enqueue();
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  // A call that synchronises the host while it is enqueued (a plugin's cudaFree, a Python
  // module's .item()) cannot start until the hold gives up: probed once before the warm-up, and
  // timed without the hold if so. Its time then includes the gaps between its launches, which
  // the method says.
  const bool held = !synchronises_while_enqueued(
      [&](unsigned long long ns) { return timed_call(ns).second; }, kHoldProbeNs, kHoldTimeoutNs);
  auto one_rep = [&] {
    // Clocks are read between reps (never inside one), on the first and then every 50 ms: an
    // NVML query costs tens of microseconds.
    const auto now = std::chrono::steady_clock::now();
    if (now - last_sample >= std::chrono::milliseconds(50)) {
      if (auto s = nvml_.sample()) {
        samples.push_back(*s);
      }
      last_sample = now;
    }
    const auto [seconds, timed_out] = timed_call(held ? kHoldTimeoutNs : 0);
    if (timed_out) {
      throw std::runtime_error("timing on " + std::string("cuda:") + std::to_string(device_) +
                               ": the stream-holding kernel gave up after " +
                               std::to_string(kHoldTimeoutNs / 1000000) +
                               " ms before the host released it (enqueuing one rep stalled)");
    }
    return seconds;
  };
  const std::string method = gpu_timing_method(
      what, held, opt.flush_cache ? std::optional<long long>(flush_.bytes() >> 20) : std::nullopt);
  TimingResult r = measure(one_rep, warm_one, opt, method);
  r.clocks = clock_reading(samples, nvml_.why_unavailable());
  return r;
}

DeviceRun::DeviceRun(DeviceStream& stream, const Problem& pr) : stream_(stream) {
  const AttnParams& p = pr.params;
  ATTN_CUDA_CHECK(cudaSetDevice(stream_.device()));
  const int rows = pr.num_rows();
  out_poison_ = HostTensor(p.dtype, {rows, p.num_heads, p.head_dim});
  poison(out_poison_);
  lse_poison_.assign(std::size_t(rows) * p.num_heads, 0.0f);
  poison(lse_poison_);
  out_ = DeviceBuffer(out_poison_.data.size() + kOutputGuardBytes);
  lse_ = DeviceBuffer(lse_poison_.size() * sizeof(float) + kOutputGuardBytes);
  sc_ = {p.num_heads,      p.num_kv_heads,   pr.max_blocks_per_seq, float(p.effective_scale()),
         float(p.softcap), p.causal ? 1 : 0, p.window_left,         p.window_right};
  if (pr.num_kv_scales() > 0) {
    std::vector<float> scales = pr.kernel_key_scales();
    const std::vector<float> v = pr.kernel_value_scales();
    scales.insert(scales.end(), v.begin(), v.end());
    upload(kv_scales_, scales.data(), scales.size() * sizeof(float));
    sc_.num_kv_scales = pr.num_kv_scales();
    sc_.k_scale = kv_scales_.get();
    sc_.v_scale = static_cast<float*>(kv_scales_.get()) + sc_.num_kv_scales;
  }
}

void DeviceRun::upload(DeviceBuffer& buf, const void* src, std::size_t bytes) {
  buf = DeviceBuffer(bytes);
  buf.upload(src, bytes, stream_.get());
}

void DeviceRun::inputs_at(DeviceBuffer& query, DeviceBuffer& key_cache, DeviceBuffer& value_cache,
                          const Problem& pr) {
  const std::size_t cache_bytes = dtype_size(pr.params.cache_dtype());
  inputs_ = {{&query, dtype_size(pr.params.dtype)},
             {&key_cache, cache_bytes},
             {&value_cache, cache_bytes}};
}

bool DeviceRun::negate_inputs() {
  if (inputs_.empty()) {
    return false;
  }
  ATTN_CUDA_CHECK(cudaSetDevice(stream_.device()));
  std::vector<std::byte> host;
  for (const auto& [buf, element_bytes] : inputs_) {
    host.resize(buf->bytes());
    if (host.empty()) {
      continue;
    }
    ATTN_CUDA_CHECK(cudaMemcpyAsync(host.data(), buf->get(), host.size(), cudaMemcpyDeviceToHost,
                                    stream_.get()));
    ATTN_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    negate_elements(host.data(), host.size(), element_bytes);
    buf->upload(host.data(), host.size(), stream_.get()); // the same address: what engines do
  }
  return true;
}

namespace {
// The byte just past a buffer's first `bytes`, where its guard lies.
void* past(const DeviceBuffer& buf, std::size_t bytes) {
  return static_cast<unsigned char*>(buf.get()) + bytes;
}
} // namespace

void DeviceRun::poison_outputs() {
  ATTN_CUDA_CHECK(cudaSetDevice(stream_.device()));
  const std::size_t out_bytes = out_poison_.data.size();
  const std::size_t lse_bytes = lse_poison_.size() * sizeof(float);
  ATTN_CUDA_CHECK(cudaMemcpyAsync(out_.get(), out_poison_.raw(), out_bytes, cudaMemcpyHostToDevice,
                                  stream_.get()));
  ATTN_CUDA_CHECK(cudaMemcpyAsync(lse_.get(), lse_poison_.data(), lse_bytes, cudaMemcpyHostToDevice,
                                  stream_.get()));
  ATTN_CUDA_CHECK(
      cudaMemsetAsync(past(out_, out_bytes), kOutputGuardByte, kOutputGuardBytes, stream_.get()));
  ATTN_CUDA_CHECK(
      cudaMemsetAsync(past(lse_, lse_bytes), kOutputGuardByte, kOutputGuardBytes, stream_.get()));
  if (ws_.bytes() > 0) {
    ATTN_CUDA_CHECK(cudaMemsetAsync(ws_.get(), 0xff, ws_.bytes(), stream_.get()));
  }
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

void DeviceRun::run() {
  ATTN_CUDA_CHECK(cudaSetDevice(stream_.device()));
  launch();
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  ATTN_CUDA_CHECK(cudaGetLastError());
}

RunOutput DeviceRun::download() {
  ATTN_CUDA_CHECK(cudaSetDevice(stream_.device()));
  RunOutput r;
  r.out = HostTensor(out_poison_.dtype, out_poison_.shape);
  r.lse.assign(lse_poison_.size(), 0.0f);
  ATTN_CUDA_CHECK(cudaMemcpyAsync(r.out.raw(), out_.get(), r.out.data.size(),
                                  cudaMemcpyDeviceToHost, stream_.get()));
  ATTN_CUDA_CHECK(cudaMemcpyAsync(r.lse.data(), lse_.get(), r.lse.size() * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream_.get()));
  std::array<unsigned char, kOutputGuardBytes> after_out{};
  std::array<unsigned char, kOutputGuardBytes> after_lse{};
  ATTN_CUDA_CHECK(cudaMemcpyAsync(after_out.data(), past(out_, r.out.data.size()),
                                  kOutputGuardBytes, cudaMemcpyDeviceToHost, stream_.get()));
  ATTN_CUDA_CHECK(cudaMemcpyAsync(after_lse.data(), past(lse_, r.lse.size() * sizeof(float)),
                                  kOutputGuardBytes, cudaMemcpyDeviceToHost, stream_.get()));
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  r.overrun = guard_overrun(after_out.data(), after_lse.data());
  return r;
}

DeviceRun::Graph::~Graph() {
  if (exec != nullptr) {
    cudaGraphExecDestroy(exec);
  }
}

TimingResult DeviceRun::time(const TimingOptions& opt) {
  ATTN_CUDA_CHECK(cudaSetDevice(stream_.device()));
  if (opt.mode == TimingMode::events) {
    return stream_.time([this] { launch(); }, opt, "cuda-events");
  }
  if (!graph_) {
    // Captured once, before any warm-up, and replayed by every call: what an engine does
    // with decode, whose launch overhead then drops out of the time.
    auto g = std::make_unique<Graph>();
    ATTN_CUDA_CHECK(cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
      launch();
    } catch (...) {
      (void)cudaStreamEndCapture(stream_.get(), &graph);
      if (graph != nullptr) {
        cudaGraphDestroy(graph);
      }
      throw;
    }
    ATTN_CUDA_CHECK(cudaStreamEndCapture(stream_.get(), &graph));
    const cudaError_t err = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (err != cudaSuccess) {
      throw_cuda_error(err, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
    graph_ = std::move(g);
  }
  cudaGraphExec_t exec = graph_->exec;
  return stream_.time([this, exec] { ATTN_CUDA_CHECK(cudaGraphLaunch(exec, stream_.get())); }, opt,
                      "cuda-graph replay");
}

// ---- decode runs

DecodeRun::DecodeRun(DeviceStream& stream, const Problem& pr, const DecodeVariant& v,
                     std::shared_ptr<const Module> mod)
    : DeviceRun(stream, pr), v_(v), shape_(decode_launch(v, pr)), mod_(std::move(mod)) {
  const AttnParams& p = pr.params;
  upload(q_, pr.query.raw(), pr.query.data.size());
  upload(k_, pr.key_cache.raw(), pr.key_cache.data.size());
  upload(v_cache_, pr.value_cache.raw(), pr.value_cache.data.size());
  upload(tables_, pr.block_tables.data(), pr.block_tables.size() * sizeof(int32_t));
  upload(lens_, pr.context_lens.data(), pr.context_lens.size() * sizeof(int32_t));
  inputs_at(q_, k_, v_cache_, pr);
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
  max_parts_ = shape_.max_parts;
}

void DecodeRun::launch() {
  const dim3 grid(shape_.grid.x, shape_.grid.y, shape_.grid.z);
  const dim3 block(shape_.block.x, shape_.block.y, shape_.block.z);
  if (grid.x == 0 || grid.y == 0) {
    return; // an empty batch: nothing to compute
  }
  if (v_.family == Family::decode_v1) {
    void* args[] = {
        &out_ptr_,    &lse_ptr_,    &q_ptr_,           &k_ptr_,           &v_ptr_,
        &tables_ptr_, &lens_ptr_,   &sc_.num_heads,    &sc_.num_kv_heads, &sc_.max_blocks_per_seq,
        &sc_.scale,   &sc_.softcap, &sc_.causal,       &sc_.window_left,  &sc_.window_right,
        &sc_.k_scale, &sc_.v_scale, &sc_.num_kv_scales};
    ATTN_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(mod_->main), grid, block, args,
                                     0, stream_.get()));
    return;
  }
  void* args[] = {&out_ptr_,
                  &lse_ptr_,
                  &q_ptr_,
                  &k_ptr_,
                  &v_ptr_,
                  &tables_ptr_,
                  &lens_ptr_,
                  &sc_.num_heads,
                  &sc_.num_kv_heads,
                  &sc_.max_blocks_per_seq,
                  &sc_.scale,
                  &sc_.softcap,
                  &sc_.causal,
                  &sc_.window_left,
                  &sc_.window_right,
                  &sc_.k_scale,
                  &sc_.v_scale,
                  &sc_.num_kv_scales,
                  &ws_m_,
                  &ws_l_,
                  &ws_o_,
                  &max_parts_};
  ATTN_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(mod_->main), grid, block, args, 0,
                                   stream_.get()));
  const dim3 rgrid(shape_.reduce_grid.x, shape_.reduce_grid.y, shape_.reduce_grid.z);
  const dim3 rblock(shape_.reduce_block.x, shape_.reduce_block.y, shape_.reduce_block.z);
  void* rargs[] = {&out_ptr_, &lse_ptr_, &lens_ptr_,     &ws_m_,
                   &ws_l_,    &ws_o_,    &sc_.num_heads, &max_parts_};
  ATTN_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(mod_->reduce), rgrid, rblock,
                                   rargs, std::size_t(shape_.reduce_smem), stream_.get()));
}

// ---- prefill runs

PrefillRun::PrefillRun(DeviceStream& stream, const Problem& pr, const PrefillVariant& v,
                       std::shared_ptr<const Module> mod)
    : DeviceRun(stream, pr), shape_(prefill_launch(v, pr)), mod_(std::move(mod)) {
  upload(q_, pr.query.raw(), pr.query.data.size());
  upload(k_, pr.key_cache.raw(), pr.key_cache.data.size());
  upload(v_, pr.value_cache.raw(), pr.value_cache.data.size());
  upload(tables_, pr.block_tables.data(), pr.block_tables.size() * sizeof(int32_t));
  upload(cu_q_, pr.cu_seqlens_q.data(), pr.cu_seqlens_q.size() * sizeof(int32_t));
  upload(cu_k_, pr.cu_seqlens_k.data(), pr.cu_seqlens_k.size() * sizeof(int32_t));
  upload(map_, shape_.tile_map.data(), shape_.tile_map.size() * sizeof(int32_t));
  inputs_at(q_, k_, v_, pr);
  ptrs_ = {out_.get(),    lse_.get(),  q_.get(),    k_.get(),  v_.get(),
           tables_.get(), cu_q_.get(), cu_k_.get(), map_.get()};
}

void PrefillRun::launch() {
  if (shape_.grid.x == 0 || shape_.grid.y == 0) {
    return; // no query rows: nothing to compute
  }
  const dim3 grid(shape_.grid.x, shape_.grid.y, shape_.grid.z);
  const dim3 block(shape_.block.x, shape_.block.y, shape_.block.z);
  void* args[] = {&ptrs_[0],         &ptrs_[1],      &ptrs_[2],         &ptrs_[3],
                  &ptrs_[4],         &ptrs_[5],      &ptrs_[6],         &ptrs_[7],
                  &ptrs_[8],         &sc_.num_heads, &sc_.num_kv_heads, &sc_.max_blocks_per_seq,
                  &sc_.scale,        &sc_.softcap,   &sc_.causal,       &sc_.window_left,
                  &sc_.window_right, &sc_.k_scale,   &sc_.v_scale,      &sc_.num_kv_scales};
  ATTN_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(mod_->main), grid, block, args,
                                   std::size_t(shape_.smem), stream_.get()));
}

} // namespace attn::cuda
