// Reading and writing the safetensors format, the container of replay files: an 8-byte header
// length, a JSON header (dtype, shape, data_offsets per tensor, string metadata), then the data.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/model/tensor.h"

namespace attn {

// The element types attn-tune accepts; anything else in a file is an InputError.
// fp8 caches come as F8_E4M3 or F8_E5M2, or as U8 with the format named in the metadata.
enum class StDType { f32, f16, bf16, i32, f8_e4m3, f8_e5m2, u8 };
// "F32", "F16", "BF16", "I32", "F8_E4M3", "F8_E5M2", "U8"
[[nodiscard]] const char* st_dtype_name(StDType t);
// The safetensors dtypes attn-tune reads, for messages: "F32, F16, BF16, I32, F8_E4M3, F8_E5M2,
// U8".
inline constexpr const char* kStDtypesRead = "F32, F16, BF16, I32, F8_E4M3, F8_E5M2, U8";
[[nodiscard]] std::size_t st_dtype_size(StDType t);

struct StTensor {
  StDType dtype = StDType::f32;
  std::vector<int64_t> shape;
  std::vector<std::byte> data; // little-endian, row-major

  [[nodiscard]] int64_t numel() const;
};

struct SafetensorsFile {
  std::map<std::string, StTensor> tensors;
  std::map<std::string, std::string> metadata; // the "__metadata__" map, empty when absent
  // Tensors of a safetensors dtype attn-tune does not read (F64, I64, ...), name to dtype: their
  // size and place are checked, their bytes not read (an engine's extra int64 tensor).
  std::map<std::string, std::string> skipped;
};

// Parses a file; every size and offset is checked against the file before any data is read.
// Throws InputError with one line naming `path` and the problem.
[[nodiscard]] SafetensorsFile read_safetensors(const std::string& path);
// The same checks on an in-memory image (`name` stands for the file in messages).
[[nodiscard]] SafetensorsFile parse_safetensors(const std::vector<std::byte>& bytes,
                                                const std::string& name);

// The file image: header padded with spaces so that the data starts 8-byte aligned.
[[nodiscard]] std::vector<std::byte> serialize_safetensors(const SafetensorsFile& f);
// Writes atomically, with the error rule of src/io/atomic_file.h.
void write_safetensors(const std::string& path, const SafetensorsFile& f);

// Conversions between file tensors and the problem model's tensors.
[[nodiscard]] StTensor to_st(const HostTensor& t);
[[nodiscard]] StTensor to_st(const std::vector<int32_t>& v, std::vector<int64_t> shape);
[[nodiscard]] StTensor to_st(const std::vector<float>& v, std::vector<int64_t> shape);
// `name` is the tensor's name, for the error when it is not a floating-point tensor (U8 is not:
// the caller retags it as the fp8 format its file names).
[[nodiscard]] HostTensor to_host(const StTensor& t, const std::string& name);
// Moves the bytes (a replay's caches can be gigabytes); `t` keeps its dtype and shape.
[[nodiscard]] HostTensor to_host(StTensor&& t, const std::string& name);
[[nodiscard]] std::vector<int32_t> to_int32(const StTensor& t, const std::string& name);
[[nodiscard]] std::vector<float> to_float32(const StTensor& t, const std::string& name);

} // namespace attn
