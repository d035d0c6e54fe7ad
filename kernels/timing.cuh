// The two helper kernels of GPU timing (src/backends/cuda/device_runs.cpp), no attention math:
//
// attn_l2_flush: reads a clean buffer of at least twice the L2 so that the next timed kernel
//   finds none of its own lines in the L2 and no dirty line to write back for anyone else.
//   Reading (not writing, as a memset would) matters: a memset leaves the L2 full of dirty lines
//   whose write-back the timed kernel would pay for. The buffer is written once when it is
//   allocated and never again, so the lines this kernel brings in are clean; the sum it keeps is
//   stored only when it equals `never` (a value the host picks so that it cannot), which keeps
//   the loads alive without a store.
//   grid: any (grid-stride loop), block: any; buffer of `n16` 16-byte words.
//
// attn_hold_stream: holds its stream until the host sets *release (host-mapped memory), so that
//   everything the host enqueues behind it (start event, the launches of one call, stop event)
//   then runs back to back with no host gap inside the timed region (nvbench's blocking kernel).
//   It gives up after `timeout_ns` of %globaltimer and sets *timed_out, so that a host that never
//   releases it (a bug, or a launch queue that filled up) cannot hang the GPU.
//   grid 1, block 1.
//
// No tunables: neither kernel is measured.

extern "C" __global__ void attn_l2_flush(const uint4* __restrict__ buf, unsigned long long n16,
                                         unsigned never, unsigned* __restrict__ sink) {
  unsigned acc = 0;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16;
       i += stride) {
    const uint4 v = buf[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == never) {
    *sink = acc;
  }
}

__device__ __forceinline__ unsigned long long attn_global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

extern "C" __global__ void attn_hold_stream(const volatile int* release, volatile int* timed_out,
                                            unsigned long long timeout_ns) {
  const unsigned long long start = attn_global_ns();
  while (*release == 0) {
    if (attn_global_ns() - start > timeout_ns) {
      *timed_out = 1;
      __threadfence_system();
      return;
    }
  }
}
