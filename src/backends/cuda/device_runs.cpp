// Runs launch with cudaLaunchKernel on the backend's stream (see device_runs.h); timing uses
// events on that stream after an L2 flush (a memset of exactly the device's L2 size).
#include "src/backends/cuda/device_runs.h"

#include <algorithm>

#include "src/backends/cuda/cuda_check.h"

namespace attn::cuda {

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

DeviceStream::DeviceStream(int device, int64_t l2_bytes) : device_(device), l2_bytes_(l2_bytes) {
  ATTN_CUDA_CHECK(cudaSetDevice(device_));
  ATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

DeviceStream::~DeviceStream() {
  flush_ = DeviceBuffer();
  if (stream_ != nullptr) {
    cudaStreamDestroy(stream_);
  }
}

void DeviceStream::flush_l2() {
  if (l2_bytes_ <= 0) {
    return;
  }
  if (flush_.get() == nullptr) {
    flush_ = DeviceBuffer(std::size_t(l2_bytes_));
  }
  ATTN_CUDA_CHECK(
      cudaMemsetAsync(flush_.get(), int(flush_value_++ & 0xff), std::size_t(l2_bytes_), stream_));
}

DeviceRun::DeviceRun(DeviceStream& stream, const Problem& pr) : stream_(stream) {
  const AttnParams& p = pr.params;
  ATTN_CUDA_CHECK(cudaSetDevice(stream_.device()));
  const int rows = pr.num_rows();
  out_poison_ = HostTensor(p.dtype, {rows, p.num_heads, p.head_dim});
  poison(out_poison_);
  lse_poison_.assign(std::size_t(rows) * p.num_heads, 0.0f);
  poison(lse_poison_);
  out_ = DeviceBuffer(out_poison_.data.size());
  lse_ = DeviceBuffer(lse_poison_.size() * sizeof(float));
  sc_ = {p.num_heads,      p.num_kv_heads,   pr.max_blocks_per_seq, float(p.effective_scale()),
         float(p.softcap), p.causal ? 1 : 0, p.window_left,         p.window_right};
}

void DeviceRun::upload(DeviceBuffer& buf, const void* src, std::size_t bytes) {
  buf = DeviceBuffer(bytes);
  buf.upload(src, bytes, stream_.get());
}

void DeviceRun::poison_outputs() {
  ATTN_CUDA_CHECK(cudaSetDevice(stream_.device()));
  ATTN_CUDA_CHECK(cudaMemcpyAsync(out_.get(), out_poison_.raw(), out_poison_.data.size(),
                                  cudaMemcpyHostToDevice, stream_.get()));
  ATTN_CUDA_CHECK(cudaMemcpyAsync(lse_.get(), lse_poison_.data(),
                                  lse_poison_.size() * sizeof(float), cudaMemcpyHostToDevice,
                                  stream_.get()));
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
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  return r;
}

TimingResult DeviceRun::time(const TimingOptions& opt) {
  ATTN_CUDA_CHECK(cudaSetDevice(stream_.device()));
  Event start;
  Event stop;
  auto one_rep = [&]() {
    if (opt.flush_cache) {
      stream_.flush_l2();
    }
    ATTN_CUDA_CHECK(cudaEventRecord(start.get(), stream_.get()));
    launch();
    ATTN_CUDA_CHECK(cudaEventRecord(stop.get(), stream_.get()));
    ATTN_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0.0f;
    ATTN_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    return double(ms) * 1e-3;
  };
  auto warm_one = [&]() {
    launch();
    ATTN_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  };
  return measure(one_rep, warm_one, opt,
                 opt.flush_cache ? "cuda-events, L2 flushed" : "cuda-events, L2 warm");
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
        &out_ptr_,    &lse_ptr_,    &q_ptr_,        &k_ptr_,           &v_ptr_,
        &tables_ptr_, &lens_ptr_,   &sc_.num_heads, &sc_.num_kv_heads, &sc_.max_blocks_per_seq,
        &sc_.scale,   &sc_.softcap, &sc_.causal,    &sc_.window_left,  &sc_.window_right};
    ATTN_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(mod_->main), grid, block, args,
                                     0, stream_.get()));
    return;
  }
  void* args[] = {
      &out_ptr_,    &lse_ptr_,    &q_ptr_,        &k_ptr_,           &v_ptr_,
      &tables_ptr_, &lens_ptr_,   &sc_.num_heads, &sc_.num_kv_heads, &sc_.max_blocks_per_seq,
      &sc_.scale,   &sc_.softcap, &sc_.causal,    &sc_.window_left,  &sc_.window_right,
      &ws_m_,       &ws_l_,       &ws_o_,         &max_parts_};
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
  ptrs_ = {out_.get(),    lse_.get(),  q_.get(),    k_.get(),  v_.get(),
           tables_.get(), cu_q_.get(), cu_k_.get(), map_.get()};
}

void PrefillRun::launch() {
  if (shape_.grid.x == 0 || shape_.grid.y == 0) {
    return; // no query rows: nothing to compute
  }
  const dim3 grid(shape_.grid.x, shape_.grid.y, shape_.grid.z);
  const dim3 block(shape_.block.x, shape_.block.y, shape_.block.z);
  void* args[] = {&ptrs_[0],        &ptrs_[1],      &ptrs_[2],         &ptrs_[3],
                  &ptrs_[4],        &ptrs_[5],      &ptrs_[6],         &ptrs_[7],
                  &ptrs_[8],        &sc_.num_heads, &sc_.num_kv_heads, &sc_.max_blocks_per_seq,
                  &sc_.scale,       &sc_.softcap,   &sc_.causal,       &sc_.window_left,
                  &sc_.window_right};
  ATTN_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(mod_->main), grid, block, args,
                                   std::size_t(shape_.smem), stream_.get()));
}

} // namespace attn::cuda
