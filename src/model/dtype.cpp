#include "src/model/dtype.h"

#include "src/model/errors.h"

namespace attn {

std::string_view dtype_name(DType t) {
  switch (t) {
  case DType::f16:
    return "fp16";
  case DType::bf16:
    return "bf16";
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
  throw InputError("unknown dtype '" + std::string(name) + "' (expected fp32, fp16 or bf16)");
}

} // namespace attn
