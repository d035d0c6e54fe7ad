// A dense, row-major host tensor of one storage dtype: how problems, outputs and replay files
// hold q, k, v and out. Index math is the caller's; this type only owns and converts.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "src/model/dtype.h"

namespace attn {

struct HostTensor {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;

  HostTensor() = default;
  HostTensor(DType t, std::vector<int64_t> s) : dtype(t), shape(std::move(s)) {
    data.resize(std::size_t(numel()) * dtype_size(t));
  }
  // Copies move the bytes with memcpy: a vector's own copy goes through memmove, which
  // AddressSanitizer's runtime does a byte at a time (internal_memmove), and copying each run's
  // problem was then a tenth of the sanitized tests' verify time. Into a tensor whose buffer
  // already holds the bytes (a run's reused copy, host_run.cpp), nothing is allocated.
  HostTensor(const HostTensor& o) : dtype(o.dtype), shape(o.shape) { copy_bytes(o); }
  HostTensor& operator=(const HostTensor& o) {
    if (this != &o) {
      dtype = o.dtype;
      shape = o.shape;
      copy_bytes(o);
    }
    return *this;
  }
  HostTensor(HostTensor&&) noexcept = default;
  HostTensor& operator=(HostTensor&&) noexcept = default;
  ~HostTensor() = default;

  [[nodiscard]] int64_t numel() const {
    return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  }
  [[nodiscard]] float get(std::size_t i) const { return load_as_float(dtype, data.data(), i); }
  void set(std::size_t i, float v) { store_from_float(dtype, data.data(), i, v); }
  [[nodiscard]] void* raw() { return data.data(); }
  [[nodiscard]] const void* raw() const { return data.data(); }
  [[nodiscard]] std::string shape_string() const;

private:
  void copy_bytes(const HostTensor& o) {
    if (data.capacity() < o.data.size()) {
      data.clear(); // so that growing the buffer does not copy the old bytes first
    }
    data.resize(o.data.size());
    if (!o.data.empty()) {
      std::memcpy(data.data(), o.data.data(), o.data.size());
    }
  }
};

// The bit pattern written into outputs before a run: a NaN with a payload no arithmetic
// produces, so that a checker can tell "never written" from "computed NaN".
inline constexpr uint32_t kPoisonF32 = 0x7fbadbadu; // signalling-NaN payload
inline constexpr uint16_t kPoisonF16 = 0x7d5au;     // signalling NaN in fp16
inline constexpr uint16_t kPoisonBF16 = 0x7f9au;    // signalling NaN in bf16
inline constexpr uint8_t kPoisonFp8 = 0xffu;        // negative NaN in both fp8 formats

void poison(HostTensor& t);
[[nodiscard]] bool is_poison(const HostTensor& t, std::size_t i);
void poison(std::vector<float>& v);
[[nodiscard]] bool is_poison(float f);

} // namespace attn
