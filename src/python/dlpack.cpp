// attn-tune's buffers as DLPack capsules that torch.utils.dlpack wraps without a copy: the
// DLPack 0.x structs, one capsule per buffer with its shape in the call's KV layout, on the CPU
// or on the CUDA device that holds the buffer.
#include "src/python/bridge_internal.h"

#include <dlfcn.h>

#include <cstdint>
#include <initializer_list>

namespace attn::python_bridge {

namespace {

// ---- DLPack 0.x, the exchange format torch.utils.dlpack reads (dmlc/dlpack's C ABI). -------
struct DLDevice {
  int32_t device_type; // 1: CPU, 2: CUDA
  int32_t device_id;
};
struct DLDataType {
  uint8_t code; // 0: int, 1: uint, 2: float, 4: bfloat
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides; // in elements
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
constexpr int32_t kDLCPU = 1;
constexpr int32_t kDLCUDA = 2;

// One tensor's description with its shape and strides; freed by the consumer's deleter.
struct Wrapped {
  DLManagedTensor managed{};
  int64_t shape[5] = {};
  int64_t strides[5] = {};
};

void delete_wrapped(DLManagedTensor* m) { delete static_cast<Wrapped*>(m->manager_ctx); }

void capsule_destructor(PyObject* capsule) {
  // Still named "dltensor": nobody consumed it, so its memory is ours to free.
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    m->deleter(m);
  }
}

// A DLPack capsule viewing `data` (row-major, `shape`), or a new None when data is null.
PyObject* capsule(const void* data, DLDataType dt, std::initializer_list<int64_t> shape,
                  DLDevice dev) {
  if (data == nullptr) {
    Py_RETURN_NONE;
  }
  auto* w = new Wrapped();
  int n = 0;
  for (int64_t s : shape) {
    w->shape[n++] = s;
  }
  int64_t stride = 1;
  for (int i = n - 1; i >= 0; --i) {
    w->strides[i] = stride;
    stride *= w->shape[i];
  }
  DLTensor& t = w->managed.dl_tensor;
  t.data = const_cast<void*>(data);
  t.device = dev;
  t.ndim = n;
  t.dtype = dt;
  t.shape = w->shape;
  t.strides = w->strides;
  w->managed.manager_ctx = w;
  w->managed.deleter = delete_wrapped;
  PyObject* cap = PyCapsule_New(&w->managed, "dltensor", capsule_destructor);
  if (cap == nullptr) {
    delete w;
  }
  return cap;
}

// Which CUDA device a pointer lives on (CUDA kernels), through the driver the process already
// has loaded; 0 when it cannot tell.
int device_of(const void* p) {
  using GetAttr = int (*)(void*, int, unsigned long long);
  static GetAttr get = [] {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h == nullptr) {
      h = dlopen("libcuda.so.1", RTLD_NOW);
    }
    return h != nullptr ? reinterpret_cast<GetAttr>(dlsym(h, "cuPointerGetAttribute")) : nullptr;
  }();
  int ordinal = 0;
  constexpr int kDeviceOrdinal = 9; // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
  if (get != nullptr && p != nullptr &&
      get(&ordinal, kDeviceOrdinal, reinterpret_cast<unsigned long long>(p)) != 0) {
    ordinal = 0;
  }
  return ordinal;
}

} // namespace

PyObject* workspace_capsule(const attn_call* c, void* workspace, uint64_t bytes, bool cuda) {
  if (workspace == nullptr || bytes == 0) {
    Py_RETURN_NONE;
  }
  const DLDevice dev = cuda ? DLDevice{kDLCUDA, device_of(c->query)} : DLDevice{kDLCPU, 0};
  return capsule(workspace, DLDataType{1, 8, 1}, {int64_t(bytes)}, dev);
}

PyObject* capsules_of(const attn_call* c, bool cuda) {
  const DLDevice dev = cuda ? DLDevice{kDLCUDA, device_of(c->query)} : DLDevice{kDLCPU, 0};
  const DLDataType dt = c->dtype == ATTN_DTYPE_F32   ? DLDataType{2, 32, 1}
                        : c->dtype == ATTN_DTYPE_F16 ? DLDataType{2, 16, 1}
                                                     : DLDataType{4, 16, 1};
  const DLDataType i32{0, 32, 1};
  const DLDataType f32{2, 32, 1};
  // An fp8 cache travels as its bytes (uint8): DLPack 0.x has no fp8 codes, and bridge.py views
  // the tensors as torch's fp8 dtype where the module's torch has one.
  const bool fp8 = c->kv_dtype != ATTN_KV_DTYPE_AUTO;
  const DLDataType cache_dt = fp8 ? DLDataType{1, 8, 1} : dt;
  const int64_t nb = c->num_blocks, kvh = c->num_kv_heads, bs = c->block_size, d = c->head_dim;
  const int64_t x = fp8 ? 16 : c->dtype == ATTN_DTYPE_F32 ? 4 : 8;
  PyObject *k = nullptr, *v = nullptr;
  switch (c->kv_layout) {
  case ATTN_KV_NHD:
    k = capsule(c->key_cache, cache_dt, {nb, bs, kvh, d}, dev);
    v = capsule(c->value_cache, cache_dt, {nb, bs, kvh, d}, dev);
    break;
  case ATTN_KV_VLLM:
    k = capsule(c->key_cache, cache_dt, {nb, kvh, d / x, bs, x}, dev);
    v = capsule(c->value_cache, cache_dt, {nb, kvh, d, bs}, dev);
    break;
  default:
    k = capsule(c->key_cache, cache_dt, {nb, kvh, bs, d}, dev);
    v = capsule(c->value_cache, cache_dt, {nb, kvh, bs, d}, dev);
    break;
  }
  const int64_t rows = c->num_rows, h = c->num_heads, b = c->batch;
  const int64_t ns = c->num_kv_scales;
  PyObject* items[11] = {
      capsule(c->query, dt, {rows, h, d}, dev),
      k,
      v,
      capsule(c->block_tables, i32, {b, c->max_blocks_per_seq}, dev),
      capsule(c->context_lens, i32, {b}, dev),
      capsule(c->cu_seqlens_q, i32, {b + 1}, dev),
      capsule(c->cu_seqlens_k, i32, {b + 1}, dev),
      capsule(c->out, dt, {rows, h, d}, dev),
      capsule(c->lse, f32, {rows, h}, dev),
      capsule(fp8 ? c->k_scale : nullptr, f32, {ns}, dev),
      capsule(fp8 ? c->v_scale : nullptr, f32, {ns}, dev),
  };
  PyObject* t = PyTuple_New(11);
  for (int i = 0; i < 11; ++i) {
    if (items[i] == nullptr) {
      Py_DECREF(t);
      for (int j = i + 1; j < 11; ++j) {
        Py_XDECREF(items[j]);
      }
      return nullptr;
    }
    PyTuple_SET_ITEM(t, i, items[i]);
  }
  return t;
}

} // namespace attn::python_bridge
