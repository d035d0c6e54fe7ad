// cuda-example: an attn-tune plugin (include/attn_tune/plugin.h) written the way an engine author
// would wrap their own kernels. Plain paged attention over an NHD cache
// ([num_blocks, block_size, num_kv_heads, head_dim]) in fp32, fp16 and bf16, accumulating in fp32,
// with every mask of SPEC.md (causal bottom-right, window_left/right, softcap, GQA) and lse.
//
// Launch shapes:
//   decode_v1         grid (num_heads, batch),             block THREADS
//   decode_v2         grid (num_heads, batch, partitions), block THREADS, then
//   decode_v2_reduce  grid (num_heads, batch),             block kReduceThreads
//   prefill           grid (ceil(max_q_len / Q_TILE), num_heads, batch), block Q_TILE warps
//   static shared memory: decode (THREADS / 32) * (kMaxHeadDim + 2) floats (the cross-warp
//   combine); prefill 2 * kKeyTile * kMaxHeadDim floats (one K and one V tile).
//
// Tunables (the configuration space the plugin declares):
//   decode_v1  threads    threads per block; each warp runs its own online softmax over every
//                         (threads / 32)-th key, then the warps combine through shared memory
//   decode_v2  partition  keys per split-KV partition (a multiple of block_size)
//              threads    threads per block of the partition kernel, as in decode_v1
//   prefill    q_tile     query rows per block, one warp per row; the block loads kKeyTile keys
//                         into shared memory and every row of the tile reads them from there
//
// A warp owns one query row: lane l holds dims d = l + 32 * i (i < kDimsPerLane) of q and of the
// accumulator, so loads of a key row are coalesced and head_dim can be anything up to 256.
#include "attn_tune/plugin.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kDimsPerLane = kMaxHeadDim / 32;
constexpr int kKeyTile = 16;        // prefill: keys per shared-memory tile
constexpr int kReduceThreads = 128; // decode_v2_reduce

// Everything a kernel reads, copied from attn_call plus the split-KV workspace.
struct Args {
  const void* query;           // [num_rows, num_heads, head_dim]
  const void* key_cache;       // NHD: [num_blocks, block_size, num_kv_heads, head_dim]
  const void* value_cache;     // same as key_cache
  const int32_t* block_tables; // [batch, max_blocks_per_seq]
  const int32_t* context_lens; // decode: [batch]
  const int32_t* cu_seqlens_q; // prefill: [batch + 1]
  const int32_t* cu_seqlens_k; // prefill: [batch + 1]
  void* out;                   // [num_rows, num_heads, head_dim]
  float* lse;                  // [num_rows, num_heads]
  int num_heads, num_kv_heads, head_dim, block_size, max_blocks_per_seq;
  float scale, softcap;
  int causal, window_left, window_right;
  // decode_v2 workspace: partial out [batch, num_heads, num_partitions, head_dim], then
  // m and l [batch, num_heads, num_partitions], all fp32.
  int partition, num_partitions;
  float* part_out;
  float* part_m;
  float* part_l;
};

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Keys [lo, hi) visible from absolute position p (SPEC.md "The function"): the visible set is
// one interval. 64-bit so that p + window never overflows.
__device__ __forceinline__ void visible_range(const Args& a, int p, int k_len, int& lo, int& hi) {
  int64_t l = 0, h = k_len;
  if (a.causal)
    h = min(h, (int64_t)p + 1);
  if (a.window_right >= 0)
    h = min(h, (int64_t)p + a.window_right + 1);
  if (a.window_left >= 0)
    l = max(l, (int64_t)p - a.window_left);
  lo = (int)min(l, (int64_t)k_len);
  hi = (int)max(h, (int64_t)lo); // empty: hi == lo
}

// Element offset of key (or value) row j of sequence b, kv head kvh, in the NHD cache.
__device__ __forceinline__ int64_t nhd_row(const Args& a, int b, int j, int kvh) {
  const int block = a.block_tables[(int64_t)b * a.max_blocks_per_seq + j / a.block_size];
  const int slot = j % a.block_size;
  return (((int64_t)block * a.block_size + slot) * a.num_kv_heads + kvh) * a.head_dim;
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2)
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__device__ __forceinline__ float score(const Args& a, float dot) {
  float s = a.scale * dot;
  if (a.softcap > 0.f)
    s = a.softcap * tanhf(s / a.softcap);
  return s;
}

// One query row's running softmax, spread over a warp (this lane's dims only).
struct RowState {
  float m = -INFINITY;          // running max score
  float l = 0.f;                // sum of exp(s - m)
  float acc[kDimsPerLane] = {}; // sum of exp(s - m) * v, unnormalised

  __device__ __forceinline__ void add(float s, const float (&v)[kDimsPerLane]) {
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new); // 0 on the first key (m = -inf)
    const float p = expf(s - m_new);
    l = l * correction + p;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i)
      acc[i] = acc[i] * correction + p * v[i];
    m = m_new;
  }
};

// Loads this lane's dims of a row (zeros past head_dim).
template <typename T>
__device__ __forceinline__ void load_row(const T* row, int head_dim, int lane,
                                         float (&x)[kDimsPerLane]) {
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int d = lane + 32 * i;
    x[i] = d < head_dim ? to_float(row[d]) : 0.f;
  }
}

__device__ __forceinline__ float lane_dot(const float (&q)[kDimsPerLane],
                                          const float (&k)[kDimsPerLane]) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i)
    s += q[i] * k[i];
  return s;
}

// Decode over keys [lo, hi) of sequence b, head h, by the whole block: warp w takes keys
// lo + w, lo + w + kWarps, ...; the warps then combine. On return every thread sees the
// block's (m, l) and s_acc[0 .. head_dim) holds the unnormalised sum of exp(s - m) * v.
template <typename T, int kWarps>
__device__ void decode_range(const Args& a, int b, int h, int lo, int hi, float& m_out,
                             float& l_out, float (&s_acc)[kWarps][kMaxHeadDim],
                             float (&s_m)[kWarps], float (&s_l)[kWarps]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kvh = h / (a.num_heads / a.num_kv_heads);
  const T* query = static_cast<const T*>(a.query) + ((int64_t)b * a.num_heads + h) * a.head_dim;
  const T* keys = static_cast<const T*>(a.key_cache);
  const T* values = static_cast<const T*>(a.value_cache);

  float q[kDimsPerLane], k[kDimsPerLane], v[kDimsPerLane];
  load_row(query, a.head_dim, lane, q);
  RowState st;
  for (int j = lo + warp; j < hi; j += kWarps) {
    const int64_t row = nhd_row(a, b, j, kvh);
    load_row(keys + row, a.head_dim, lane, k);
    load_row(values + row, a.head_dim, lane, v);
    st.add(score(a, warp_sum(lane_dot(q, k))), v);
  }

  if (lane == 0) {
    s_m[warp] = st.m;
    s_l[warp] = st.l;
  }
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < a.head_dim)
      s_acc[warp][d] = st.acc[i];
  }
  __syncthreads();

  float m = -INFINITY;
  for (int w = 0; w < kWarps; ++w)
    m = fmaxf(m, s_m[w]);
  float l = 0.f;
  for (int w = 0; w < kWarps; ++w)
    l += s_l[w] > 0.f ? s_l[w] * expf(s_m[w] - m) : 0.f;
  for (int d = threadIdx.x; d < a.head_dim; d += kWarps * 32) {
    float sum = 0.f;
    for (int w = 0; w < kWarps; ++w) {
      if (s_l[w] > 0.f)
        sum += s_acc[w][d] * expf(s_m[w] - m);
    }
    s_acc[0][d] = sum; // only this thread reads and writes column d
  }
  __syncthreads(); // callers may read any column
  m_out = m;
  l_out = l;
}

template <typename T, int kThreads>
__global__ void __launch_bounds__(kThreads) decode_v1_kernel(Args a) {
  constexpr int kWarps = kThreads / 32;
  static_assert(kThreads % 32 == 0 && kWarps >= 1, "threads is a whole number of warps");
  __shared__ float s_acc[kWarps][kMaxHeadDim];
  __shared__ float s_m[kWarps], s_l[kWarps];
  const int h = blockIdx.x, b = blockIdx.y;
  const int k_len = a.context_lens[b];
  int lo, hi;
  visible_range(a, k_len - 1, k_len, lo, hi);
  float m, l;
  decode_range<T, kWarps>(a, b, h, lo, hi, m, l, s_acc, s_m, s_l);

  const int64_t row = (int64_t)b * a.num_heads + h;
  T* out = static_cast<T*>(a.out) + row * a.head_dim;
  for (int d = threadIdx.x; d < a.head_dim; d += kThreads)
    out[d] = from_float<T>(l > 0.f ? s_acc[0][d] / l : 0.f);
  if (threadIdx.x == 0)
    a.lse[row] = l > 0.f ? m + logf(l) : -INFINITY;
}

// Partition t of sequence b covers keys [t * partition, (t + 1) * partition) of its visible range
// and writes (m_t, l_t, o_t = normalised partial out) into the workspace.
template <typename T, int kThreads>
__global__ void __launch_bounds__(kThreads) decode_v2_kernel(Args a) {
  constexpr int kWarps = kThreads / 32;
  static_assert(kThreads % 32 == 0 && kWarps >= 1, "threads is a whole number of warps");
  __shared__ float s_acc[kWarps][kMaxHeadDim];
  __shared__ float s_m[kWarps], s_l[kWarps];
  const int h = blockIdx.x, b = blockIdx.y, t = blockIdx.z;
  const int k_len = a.context_lens[b];
  const int start = t * a.partition;
  if (start >= k_len)
    return; // the reduce reads only partitions that hold keys
  int lo, hi;
  visible_range(a, k_len - 1, k_len, lo, hi);
  lo = max(lo, start);
  hi = min(hi, start + a.partition);
  float m, l;
  decode_range<T, kWarps>(a, b, h, lo, hi, m, l, s_acc, s_m, s_l);

  const int64_t part = ((int64_t)b * a.num_heads + h) * a.num_partitions + t;
  for (int d = threadIdx.x; d < a.head_dim; d += kThreads)
    a.part_out[part * a.head_dim + d] = l > 0.f ? s_acc[0][d] / l : 0.f;
  if (threadIdx.x == 0) {
    a.part_m[part] = l > 0.f ? m : -INFINITY;
    a.part_l[part] = l;
  }
}

// SPEC.md "Split-KV partials": m = max m_t, w_t = l_t exp(m_t - m), out = sum w_t o_t / sum w_t,
// lse = m + log(sum w_t). Each thread recomputes the weights: partitions are few.
template <typename T>
__global__ void __launch_bounds__(kReduceThreads) decode_v2_reduce_kernel(Args a) {
  const int h = blockIdx.x, b = blockIdx.y;
  const int k_len = a.context_lens[b];
  const int parts = min((k_len + a.partition - 1) / a.partition, a.num_partitions);
  const int64_t row = (int64_t)b * a.num_heads + h;
  const float* m_t = a.part_m + row * a.num_partitions;
  const float* l_t = a.part_l + row * a.num_partitions;
  const float* o_t = a.part_out + row * a.num_partitions * a.head_dim;

  float m = -INFINITY, l = 0.f;
  for (int t = 0; t < parts; ++t)
    m = fmaxf(m, l_t[t] > 0.f ? m_t[t] : -INFINITY);
  for (int t = 0; t < parts; ++t)
    l += l_t[t] > 0.f ? l_t[t] * expf(m_t[t] - m) : 0.f;

  T* out = static_cast<T*>(a.out) + row * a.head_dim;
  for (int d = threadIdx.x; d < a.head_dim; d += kReduceThreads) {
    float sum = 0.f;
    for (int t = 0; t < parts; ++t) {
      if (l_t[t] > 0.f)
        sum += l_t[t] * expf(m_t[t] - m) * o_t[(int64_t)t * a.head_dim + d];
    }
    out[d] = from_float<T>(l > 0.f ? sum / l : 0.f);
  }
  if (threadIdx.x == 0)
    a.lse[row] = l > 0.f ? m + logf(l) : -INFINITY;
}

// Rows [tile * kQTile, ...) of sequence b, head h: warp r owns row tile * kQTile + r. The block
// walks the union of its rows' visible ranges kKeyTile keys at a time, staging K and V in shared
// memory (as fp32); each warp folds in the keys its own row sees.
template <typename T, int kQTile>
__global__ void __launch_bounds__(kQTile * 32) prefill_kernel(Args a) {
  __shared__ float s_k[kKeyTile][kMaxHeadDim];
  __shared__ float s_v[kKeyTile][kMaxHeadDim];
  const int b = blockIdx.z, h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q_start = a.cu_seqlens_q[b], q_len = a.cu_seqlens_q[b + 1] - q_start;
  const int k_len = a.cu_seqlens_k[b + 1] - a.cu_seqlens_k[b];
  const int first = blockIdx.x * kQTile;
  if (first >= q_len)
    return; // whole block: no thread has reached a barrier
  const int last = min(first + kQTile, q_len) - 1;
  const int i = first + warp;    // this warp's row within the sequence
  const bool active = i <= last; // idle warps still help load tiles

  // Visible ranges grow with the row's position, so the block's union is [lo(first), hi(last)).
  int lo, hi, block_lo, unused, block_hi;
  visible_range(a, k_len - q_len + min(i, last), k_len, lo, hi);
  visible_range(a, k_len - q_len + first, k_len, block_lo, unused);
  visible_range(a, k_len - q_len + last, k_len, unused, block_hi);

  const int kvh = h / (a.num_heads / a.num_kv_heads);
  const int64_t row = (int64_t)(q_start + min(i, last)) * a.num_heads + h;
  const T* keys = static_cast<const T*>(a.key_cache);
  const T* values = static_cast<const T*>(a.value_cache);
  float q[kDimsPerLane], k[kDimsPerLane], v[kDimsPerLane];
  load_row(static_cast<const T*>(a.query) + row * a.head_dim, a.head_dim, lane, q);
  RowState st;

  for (int tile = block_lo; tile < block_hi; tile += kKeyTile) {
    __syncthreads(); // the previous tile has been read by every warp
    for (int e = threadIdx.x; e < kKeyTile * a.head_dim; e += kQTile * 32) {
      const int key = e / a.head_dim, d = e % a.head_dim, j = tile + key;
      const bool in = j < block_hi;
      const int64_t at = in ? nhd_row(a, b, j, kvh) + d : 0;
      s_k[key][d] = in ? to_float(keys[at]) : 0.f;
      s_v[key][d] = in ? to_float(values[at]) : 0.f;
    }
    __syncthreads();
    if (!active)
      continue;
    const int j_end = min(tile + kKeyTile, hi);
    for (int j = max(tile, lo); j < j_end; ++j) {
      load_row(s_k[j - tile], a.head_dim, lane, k);
      load_row(s_v[j - tile], a.head_dim, lane, v);
      st.add(score(a, warp_sum(lane_dot(q, k))), v);
    }
  }

  if (!active)
    return;
  T* out = static_cast<T*>(a.out) + row * a.head_dim;
#pragma unroll
  for (int e = 0; e < kDimsPerLane; ++e) {
    const int d = lane + 32 * e;
    if (d < a.head_dim)
      out[d] = from_float<T>(st.l > 0.f ? st.acc[e] / st.l : 0.f);
  }
  if (lane == 0)
    a.lse[row] = st.l > 0.f ? st.m + logf(st.l) : -INFINITY;
}

// ---------------------------------------------------------------------------------------------
// Host side: the declarations attn-tune reads, can_run, workspace_size and run.

const int kDecodeV1Threads[] = {64, 128, 256};
const int kDecodeV2Partitions[] = {256, 512, 1024};
const int kDecodeV2Threads[] = {128, 256};
const int kPrefillQTiles[] = {4, 8, 16};

const attn_param_space kDecodeV1Params[] = {{"threads", kDecodeV1Threads, 3}};
const attn_param_space kDecodeV2Params[] = {{"partition", kDecodeV2Partitions, 3},
                                            {"threads", kDecodeV2Threads, 2}};
const attn_param_space kPrefillParams[] = {{"q_tile", kPrefillQTiles, 3}};

const attn_family_decl kFamilies[] = {
    {ATTN_FAMILY_DECODE_V1, ATTN_KV_NHD, /*writes_lse=*/1, kDecodeV1Params, 1},
    {ATTN_FAMILY_DECODE_V2, ATTN_KV_NHD, /*writes_lse=*/1, kDecodeV2Params, 2},
    {ATTN_FAMILY_PREFILL, ATTN_KV_NHD, /*writes_lse=*/1, kPrefillParams, 1},
};

int fail(char* msg, size_t size, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
int fail(char* msg, size_t size, const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  attn_plugin_write_message(msg, size, buf);
  return 1;
}

const attn_family_decl* find_family(attn_family family) {
  for (const attn_family_decl& f : kFamilies)
    if (f.family == family)
      return &f;
  return nullptr;
}

// The value of parameter `name` in `config`, checked against the declared values.
int param(const attn_config* config, const attn_family_decl& fam, const char* name, int* value,
          char* msg, size_t size) {
  for (int i = 0; config != nullptr && i < config->num_params; ++i) {
    if (strcmp(config->names[i], name) != 0)
      continue;
    for (int p = 0; p < fam.num_params; ++p) {
      if (strcmp(fam.params[p].name, name) != 0)
        continue;
      for (int v = 0; v < fam.params[p].num_values; ++v) {
        if (fam.params[p].values[v] == config->values[i]) {
          *value = config->values[i];
          return 0;
        }
      }
    }
    return fail(msg, size, "%s %d is not in the declared configuration space", name,
                config->values[i]);
  }
  return fail(msg, size, "the configuration has no parameter '%s'", name);
}

// The configuration's tunables, read and checked against the call; 0 or a reason.
struct Tunables {
  int threads = 0, partition = 0, q_tile = 0;
};

int num_partitions(const attn_call* call, int partition) {
  return (call->max_k_len + partition - 1) / partition;
}

int check(const attn_config* config, const attn_call* call, Tunables* t, char* msg, size_t size) {
  const attn_family_decl* fam = find_family(call->family);
  if (fam == nullptr)
    return fail(msg, size, "family %d is not implemented", (int)call->family);
  if (call->kv_layout != ATTN_KV_NHD)
    return fail(msg, size, "this plugin reads NHD caches only");
  if (call->dtype != ATTN_DTYPE_F32 && call->dtype != ATTN_DTYPE_F16 &&
      call->dtype != ATTN_DTYPE_BF16)
    return fail(msg, size, "dtype %d is not supported", (int)call->dtype);
  if (call->head_dim < 1 || call->head_dim > kMaxHeadDim)
    return fail(msg, size, "head_dim %d is not supported (1 to %d)", call->head_dim, kMaxHeadDim);
  if (call->num_kv_heads < 1 || call->num_heads % call->num_kv_heads != 0)
    return fail(msg, size, "num_heads %d is not a multiple of num_kv_heads %d", call->num_heads,
                call->num_kv_heads);
  if (call->block_size < 1)
    return fail(msg, size, "block_size %d", call->block_size);
  // Grid y and z are at most 65535.
  if (call->batch > 65535 || call->num_heads > 65535)
    return fail(msg, size, "batch %d or num_heads %d exceeds 65535", call->batch, call->num_heads);
  switch (call->family) {
  case ATTN_FAMILY_DECODE_V1:
    return param(config, *fam, "threads", &t->threads, msg, size);
  case ATTN_FAMILY_DECODE_V2:
    if (param(config, *fam, "partition", &t->partition, msg, size) != 0 ||
        param(config, *fam, "threads", &t->threads, msg, size) != 0)
      return 1;
    if (t->partition % call->block_size != 0)
      return fail(msg, size, "partition %d is not a multiple of block_size %d", t->partition,
                  call->block_size);
    if (num_partitions(call, t->partition) > 65535)
      return fail(msg, size, "%d partitions exceed 65535", num_partitions(call, t->partition));
    return 0;
  case ATTN_FAMILY_PREFILL:
    return param(config, *fam, "q_tile", &t->q_tile, msg, size);
  }
  return 1;
}

uint64_t v2_workspace_bytes(const attn_call* call, int partition) {
  const uint64_t parts = (uint64_t)call->batch * call->num_heads * num_partitions(call, partition);
  return parts * (uint64_t)(call->head_dim + 2) * sizeof(float);
}

int can_run(void*, const attn_config* config, const attn_call* call, char* reason,
            size_t reason_size) {
  Tunables t;
  return check(config, call, &t, reason, reason_size);
}

int workspace_size(void*, const attn_config* config, const attn_call* call, uint64_t* bytes,
                   char* err, size_t err_size) {
  Tunables t;
  if (check(config, call, &t, err, err_size) != 0)
    return 1;
  *bytes = call->family == ATTN_FAMILY_DECODE_V2 ? v2_workspace_bytes(call, t.partition) : 0;
  return 0;
}

template <typename T> void launch_decode_v1(const Args& a, int threads, int batch, cudaStream_t s) {
  const dim3 grid(a.num_heads, batch);
  switch (threads) {
  case 64:
    decode_v1_kernel<T, 64><<<grid, 64, 0, s>>>(a);
    break;
  case 128:
    decode_v1_kernel<T, 128><<<grid, 128, 0, s>>>(a);
    break;
  case 256:
    decode_v1_kernel<T, 256><<<grid, 256, 0, s>>>(a);
    break;
  }
}

template <typename T> void launch_decode_v2(const Args& a, int threads, int batch, cudaStream_t s) {
  if (a.num_partitions > 0) { // a zero grid is a launch error; the reduce still writes the rows
    const dim3 grid(a.num_heads, batch, a.num_partitions);
    switch (threads) {
    case 128:
      decode_v2_kernel<T, 128><<<grid, 128, 0, s>>>(a);
      break;
    case 256:
      decode_v2_kernel<T, 256><<<grid, 256, 0, s>>>(a);
      break;
    }
  }
  decode_v2_reduce_kernel<T><<<dim3(a.num_heads, batch), kReduceThreads, 0, s>>>(a);
}

template <typename T>
void launch_prefill(const Args& a, const attn_call* call, int q_tile, cudaStream_t s) {
  const dim3 grid((call->max_q_len + q_tile - 1) / q_tile, a.num_heads, call->batch);
  switch (q_tile) {
  case 4:
    prefill_kernel<T, 4><<<grid, 4 * 32, 0, s>>>(a);
    break;
  case 8:
    prefill_kernel<T, 8><<<grid, 8 * 32, 0, s>>>(a);
    break;
  case 16:
    prefill_kernel<T, 16><<<grid, 16 * 32, 0, s>>>(a);
    break;
  }
}

template <typename T>
void launch(const Args& a, const attn_call* call, const Tunables& t, cudaStream_t s) {
  switch (call->family) {
  case ATTN_FAMILY_DECODE_V1:
    launch_decode_v1<T>(a, t.threads, call->batch, s);
    break;
  case ATTN_FAMILY_DECODE_V2:
    launch_decode_v2<T>(a, t.threads, call->batch, s);
    break;
  case ATTN_FAMILY_PREFILL:
    launch_prefill<T>(a, call, t.q_tile, s);
    break;
  }
}

int run(void*, const attn_config* config, const attn_call* call, void* workspace,
        uint64_t workspace_bytes, void* stream, char* err, size_t err_size) {
  Tunables t;
  if (check(config, call, &t, err, err_size) != 0)
    return 1;
  // Nothing to compute, and a grid with a zero extent is a launch error.
  if (call->batch == 0 || call->num_heads == 0 || call->num_rows == 0)
    return 0;
  if (call->family == ATTN_FAMILY_PREFILL && call->max_q_len == 0)
    return 0;

  Args a{};
  a.query = call->query;
  a.key_cache = call->key_cache;
  a.value_cache = call->value_cache;
  a.block_tables = call->block_tables;
  a.context_lens = call->context_lens;
  a.cu_seqlens_q = call->cu_seqlens_q;
  a.cu_seqlens_k = call->cu_seqlens_k;
  a.out = call->out;
  a.lse = call->lse;
  a.num_heads = call->num_heads;
  a.num_kv_heads = call->num_kv_heads;
  a.head_dim = call->head_dim;
  a.block_size = call->block_size;
  a.max_blocks_per_seq = call->max_blocks_per_seq;
  a.scale = call->scale;
  a.softcap = call->softcap;
  a.causal = call->causal;
  a.window_left = call->window_left;
  a.window_right = call->window_right;
  if (call->family == ATTN_FAMILY_DECODE_V2) {
    const uint64_t need = v2_workspace_bytes(call, t.partition);
    if (workspace == nullptr || workspace_bytes < need)
      return fail(err, err_size, "decode_v2 needs a workspace of %llu bytes, got %llu",
                  (unsigned long long)need, (unsigned long long)workspace_bytes);
    a.partition = t.partition;
    a.num_partitions = num_partitions(call, t.partition);
    const uint64_t parts = (uint64_t)call->batch * call->num_heads * a.num_partitions;
    a.part_out = static_cast<float*>(workspace);
    a.part_m = a.part_out + parts * call->head_dim;
    a.part_l = a.part_m + parts;
  }

  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (call->dtype) {
  case ATTN_DTYPE_F32:
    launch<float>(a, call, t, s);
    break;
  case ATTN_DTYPE_F16:
    launch<__half>(a, call, t, s);
    break;
  case ATTN_DTYPE_BF16:
    launch<__nv_bfloat16>(a, call, t, s);
    break;
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return fail(err, err_size, "cuda-example: kernel launch failed: %s (%s, %s:%d)",
                cudaGetErrorString(e), cudaGetErrorName(e), __FILE__, __LINE__);
  return 0;
}

} // namespace

extern "C" __attribute__((visibility("default"))) int
attn_tune_plugin_init(uint32_t host_abi_version, attn_plugin_api* api, size_t api_size, char* err,
                      size_t err_size) {
  ATTN_PLUGIN_CHECK_HOST(host_abi_version, api, api_size, err, err_size);
  api->name = "cuda-example";
  api->version = "1.0";
  api->device_kind = ATTN_DEVICE_CUDA;
  api->families = kFamilies;
  api->num_families = (int)(sizeof kFamilies / sizeof kFamilies[0]);
  api->state = nullptr; // no state: everything is in the declarations above
  api->can_run = can_run;
  api->workspace_size = workspace_size;
  api->run = run;
  api->destroy = nullptr;
  return 0;
}
