#include "src/model/tensor.h"

#include <cstring>

namespace attn {

std::string HostTensor::shape_string() const {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

void poison(HostTensor& t) {
  // Count what is allocated, not numel(): a default-constructed tensor has shape [] (numel 1)
  // but no bytes, and poisoning it must not write through a null pointer.
  const std::size_t n = t.data.size() / dtype_size(t.dtype);
  if (t.dtype == DType::f32) {
    auto* p = static_cast<uint32_t*>(t.raw());
    std::fill(p, p + n, kPoisonF32);
  } else if (is_fp8(t.dtype)) {
    auto* p = static_cast<uint8_t*>(t.raw());
    std::fill(p, p + n, kPoisonFp8);
  } else {
    auto* p = static_cast<uint16_t*>(t.raw());
    std::fill(p, p + n, t.dtype == DType::f16 ? kPoisonF16 : kPoisonBF16);
  }
}

bool is_poison(const HostTensor& t, std::size_t i) {
  if (t.dtype == DType::f32) {
    return static_cast<const uint32_t*>(t.raw())[i] == kPoisonF32;
  }
  if (is_fp8(t.dtype)) {
    return static_cast<const uint8_t*>(t.raw())[i] == kPoisonFp8;
  }
  return static_cast<const uint16_t*>(t.raw())[i] ==
         (t.dtype == DType::f16 ? kPoisonF16 : kPoisonBF16);
}

void poison(std::vector<float>& v) {
  float f;
  std::memcpy(&f, &kPoisonF32, 4);
  std::fill(v.begin(), v.end(), f);
}

bool is_poison(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u == kPoisonF32;
}

} // namespace attn
