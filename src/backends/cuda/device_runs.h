// A problem resident on the GPU with one compiled variant, ready to launch and time: the decode
// and prefill runs, the stream they share, and the device memory and events they are built from.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "src/backends/backend.h"
#include "src/backends/cuda/cuda_backend.h"
#include "src/backends/cuda/decode_launch.h"
#include "src/backends/cuda/module_cache.h"
#include "src/backends/cuda/nvml_clocks.h"
#include "src/backends/cuda/prefill_launch.h"

namespace attn::cuda {

// Device memory owned by one object; zero-byte requests still get a valid pointer.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceBuffer();
  [[nodiscard]] void* get() const { return ptr_; }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }
  // Copies `bytes` from the host on `stream` and waits for it: the runs launch on a non-blocking
  // stream, which a plain cudaMemcpy (legacy stream) does not order its kernels after.
  void upload(const void* src, std::size_t bytes, cudaStream_t stream);

private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

class Event {
public:
  Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();
  [[nodiscard]] cudaEvent_t get() const { return e_; }

private:
  cudaEvent_t e_ = nullptr;
};

// The backend's stream on its device, which all its runs launch on, and how calls on it are
// timed: the L2 flush, the kernel that holds the stream while a rep is enqueued (both from
// kernels/timing.cuh) and the clock readings; the backend owns it and outlives its runs.
class DeviceStream {
public:
  // `uuid` finds the device in NVML; `target` is what kernels/timing.cuh is compiled for.
  DeviceStream(int device, int64_t l2_bytes, const std::string& uuid, TargetArch target);
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;
  ~DeviceStream();
  [[nodiscard]] int device() const { return device_; }
  [[nodiscard]] cudaStream_t get() const { return stream_; }

  // Times one call that `enqueue` puts on the stream (the launches of a run, a graph launch, a
  // copy) under `opt`: warm-up for opt.warmup_seconds of back-to-back calls, then per rep the L2
  // flush (when asked) and a synchronize, the hold kernel, start event, the call, stop event,
  // release; the clocks are sampled between reps. A call that synchronises the host while it is
  // enqueued would wait for the hold: a probe rep finds it (synchronises_while_enqueued in
  // timing.h) and its reps go unheld, which the method says. `what` starts the method
  // ("cuda-events").
  [[nodiscard]] TimingResult time(const std::function<void()>& enqueue, const TimingOptions& opt,
                                  const std::string& what);

private:
  // Compiles (disk-cached) and loads kernels/timing.cuh, allocates and cleans the flush buffer
  // and the host-mapped flags; once, before the first warm-up, so no compile lands in a timing.
  void load_helpers();
  // Reads the flush buffer through the L2, then waits for it.
  void flush_l2();
  // Enqueues attn_hold_stream, which gives up after timeout_ns; release() lets it finish, and
  // hold_timed_out() (once the rep's stop event completed) says whether it gave up first.
  void hold(unsigned long long timeout_ns);
  void release();
  [[nodiscard]] bool hold_timed_out() const;

  int device_;
  int64_t l2_bytes_;
  TargetArch target_;
  cudaStream_t stream_ = nullptr;
  int sm_count_ = 1;
  cudaLibrary_t helpers_ = nullptr;
  cudaKernel_t flush_kernel_ = nullptr;
  cudaKernel_t hold_kernel_ = nullptr;
  DeviceBuffer flush_;
  DeviceBuffer sink_;
  int* host_flags_ = nullptr; // [release, timed_out], pinned and mapped
  int* dev_flags_ = nullptr;  // the same memory as the device sees it
  NvmlClocks nvml_;
};

// What both kernel families' runs share: out and lse with their poison images and the guards
// after them, one synchronous launch, download, the rewrite of the inputs in place, and timing on
// the stream (events, or a CUDA graph of launch() captured once). A family adds its inputs and
// launch().
class DeviceRun : public PreparedRun {
public:
  // out and lse, the guard after each (kOutputGuardBytes), and the workspace: a reduce that
  // reads partials nobody wrote gets NaN (0xff bytes).
  void poison_outputs() override;
  void run() override;
  // out and lse as the kernel left them, with whatever it wrote past either (RunOutput::overrun).
  [[nodiscard]] RunOutput download() override;
  // The query and both caches negated where the kernel reads them (the buffers inputs_at named):
  // each brought to the host, its elements' signs flipped, and written back to the same address.
  // False when the run named none.
  bool negate_inputs() override;
  [[nodiscard]] TimingResult time(const TimingOptions& opt) override;

protected:
  // Allocates out [rows, num_heads, head_dim] and lse [rows, num_heads] on the stream's device.
  DeviceRun(DeviceStream& stream, const Problem& pr);
  // Enqueues the family's kernels on the stream.
  virtual void launch() = 0;
  // Allocates `buf` for `bytes` and fills it from `src` on the stream.
  void upload(DeviceBuffer& buf, const void* src, std::size_t bytes);
  // Names the buffers the kernel reads the query and the caches from, for negate_inputs: a
  // subclass whose kernel reads them afresh on every call (not a plugin's prepared copy).
  void inputs_at(DeviceBuffer& query, DeviceBuffer& key_cache, DeviceBuffer& value_cache,
                 const Problem& pr);

  // The scalar arguments every kernel file takes after its pointers, in that order (PagedArgs
  // in kernels/kernel_common.cuh), filled from the problem and kept alive for cudaLaunchKernel's
  // pointer array.
  struct PagedScalars {
    int num_heads = 0;
    int num_kv_heads = 0;
    int max_blocks_per_seq = 0;
    float scale = 0.0f;
    float softcap = 0.0f;
    int causal = 1;
    int window_left = -1;
    int window_right = -1;
    // An fp8 cache's scales (device pointers into kv_scales_, null otherwise) and their count.
    void* k_scale = nullptr;
    void* v_scale = nullptr;
    int num_kv_scales = 0;
  };

  DeviceStream& stream_;
  DeviceBuffer out_, lse_;
  DeviceBuffer kv_scales_; // an fp8 cache's k_scale then v_scale, num_kv_scales each
  DeviceBuffer ws_;        // the kernels' workspace (decode_v2's partials, a plugin's), if any
  HostTensor out_poison_;
  std::vector<float> lse_poison_;
  PagedScalars sc_;

private:
  // The buffers negate_inputs rewrites, each with its element size; empty: not rewritable.
  std::vector<std::pair<DeviceBuffer*, std::size_t>> inputs_;
  // launch() captured into an executable graph, for TimingMode::graph; made on first use.
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    Graph() = default;
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;
    ~Graph();
  };
  std::unique_ptr<Graph> graph_;
};

// kernels/decode.cuh: decode_v1, or decode_v2 followed by its reduce.
class DecodeRun final : public DeviceRun {
public:
  DecodeRun(DeviceStream& stream, const Problem& pr, const DecodeVariant& v,
            std::shared_ptr<const Module> mod);

private:
  void launch() override;

  DecodeVariant v_;
  DecodeLaunch shape_;
  std::shared_ptr<const Module> mod_;
  DeviceBuffer q_, k_, v_cache_, tables_, lens_;
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
  int max_parts_ = 0;
};

// kernels/prefill.cuh over the q-tile map of its launch shape.
class PrefillRun final : public DeviceRun {
public:
  PrefillRun(DeviceStream& stream, const Problem& pr, const PrefillVariant& v,
             std::shared_ptr<const Module> mod);

private:
  void launch() override;

  PrefillLaunch shape_;
  std::shared_ptr<const Module> mod_;
  DeviceBuffer q_, k_, v_, tables_, cu_q_, cu_k_, map_;
  // Kernel arguments in prefill.cuh's order, kept alive for cudaLaunchKernel's pointer array:
  // out, lse, q, k_cache, v_cache, block_tables, cu_seqlens_q, cu_seqlens_k, tile_map.
  std::array<void*, 9> ptrs_{};
};

} // namespace attn::cuda
