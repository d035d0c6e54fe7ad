#include "src/model/dtype.h"

#include "src/model/errors.h"

namespace attn {

std::string_view dtype_name(DType t) {
  switch (t) {
  case DType::f16:
    return "fp16";
  case DType::bf16:
    return "bf16";
  case DType::fp8_e4m3:
    return "fp8_e4m3";
  case DType::fp8_e5m2:
    return "fp8_e5m2";
  default:
    return "fp32";
  }
}

DType parse_dtype(std::string_view name) {
  if (name == "fp32" || name == "float32" || name == "f32" || name == "float") {
    return DType::f32;
  }
  if (name == "fp16" || name == "float16" || name == "f16" || name == "half") {
    return DType::f16;
  }
  if (name == "bf16" || name == "bfloat16") {
    return DType::bf16;
  }
  if (name.substr(0, 3) == "fp8" || name.substr(0, 6) == "float8" || name == "e4m3" ||
      name == "e5m2") {
    throw InputError("dtype '" + std::string(name) +
                     "' is a KV-cache dtype: queries and outputs are fp32, fp16 or bf16, and the "
                     "cache's dtype is given apart (kv_dtype)");
  }
  throw InputError("unknown dtype '" + std::string(name) + "' (expected fp32, fp16 or bf16)");
}

DType parse_kv_dtype(std::string_view name, DType query) {
  if (name == "auto" || name == dtype_name(query)) {
    return query;
  }
  if (name == "fp8" || name == "fp8_e4m3" || name == "e4m3" || name == "float8_e4m3fn" ||
      name == "fp8_e4m3fn") {
    return DType::fp8_e4m3;
  }
  if (name == "fp8_e5m2" || name == "e5m2" || name == "float8_e5m2") {
    return DType::fp8_e5m2;
  }
  throw InputError("unknown KV-cache dtype '" + std::string(name) + "' (expected auto, fp8, " +
                   "fp8_e4m3 or fp8_e5m2, or the query dtype " + std::string(dtype_name(query)) +
                   ")");
}

} // namespace attn
