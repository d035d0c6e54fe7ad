// Reader and writer of the safetensors format. Hostile files are expected (engine dumps that a
// crash cut short, hand-edited headers), so nothing is read before the whole header checks out.
#include "src/io/safetensors.h"
#include "src/io/json_unique.h"

#include "src/io/atomic_file.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "src/model/errors.h"

namespace attn {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; attn-tune copies it as is");

namespace {

// memcpy that accepts n == 0 with null pointers (an empty tensor's vector has no storage; memcpy
// from a null pointer is undefined even for zero bytes).
void copy_bytes(void* dst, const void* src, std::size_t n) {
  if (n > 0) {
    std::memcpy(dst, src, n);
  }
}

// A header larger than this is not a replay file; the official implementation caps it likewise.
constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;

[[noreturn]] void bad(const std::string& file, const std::string& what) {
  throw InputError(file + ": " + what);
}

bool parse_st_dtype(const std::string& s, StDType& t) {
  if (s == "F32") {
    t = StDType::f32;
  } else if (s == "F16") {
    t = StDType::f16;
  } else if (s == "BF16") {
    t = StDType::bf16;
  } else if (s == "I32") {
    t = StDType::i32;
  } else if (s == "F8_E4M3") {
    t = StDType::f8_e4m3;
  } else if (s == "F8_E5M2") {
    t = StDType::f8_e5m2;
  } else if (s == "U8") {
    t = StDType::u8;
  } else {
    return false;
  }
  return true;
}

// What the header says about one tensor, checked against the data section's size.
struct Entry {
  std::string name;
  StDType dtype;
  std::vector<int64_t> shape;
  uint64_t begin;
  uint64_t end;
  std::string other_dtype; // a safetensors dtype attn-tune does not read: the tensor is skipped
};

// The element size of the safetensors dtypes attn-tune does not read (0: not a safetensors
// dtype): their tensors are checked for size and place, and skipped.
uint64_t other_dtype_size(const std::string& s) {
  if (s == "F64" || s == "I64" || s == "U64") {
    return 8;
  }
  if (s == "U32") {
    return 4;
  }
  if (s == "I16" || s == "U16") {
    return 2;
  }
  if (s == "I8" || s == "BOOL" || s == "F8_E8M0") {
    return 1;
  }
  return 0;
}

uint64_t non_negative_integer(const nlohmann::json& v, const std::string& file,
                              const std::string& what) {
  if (v.is_number_unsigned()) {
    return v.get<uint64_t>();
  }
  if (v.is_number_integer()) { // signed in JSON means negative here
    bad(file, what + " is negative (" + v.dump() + ")");
  }
  bad(file, what + " is not an integer (" + v.dump() + ")");
}

// Validates the JSON header against a data section of `data_size` bytes and returns the tensors
// and metadata it describes, sorted by offset.
std::vector<Entry> parse_header(const std::string& header, uint64_t data_size,
                                const std::string& file, std::map<std::string, std::string>& meta) {
  nlohmann::json j;
  try {
    j = parse_json_unique_keys(header);
  } catch (const DuplicateKey& e) {
    bad(file, std::string("the header: ") + e.what());
  } catch (const nlohmann::json::exception& e) {
    bad(file, "the header is not valid JSON (" + json_error_words(e) + ")");
  }
  if (!j.is_object()) {
    bad(file, "the header is not a JSON object");
  }
  std::vector<Entry> entries;
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) {
        bad(file, "__metadata__ is not an object of strings");
      }
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) {
          bad(file, "__metadata__ key '" + k + "' is not a string (" + s.dump() + ")");
        }
        meta[k] = s.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!v.is_object()) {
      bad(file, where + " is not described by an object");
    }
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      if (!v.contains(key)) {
        bad(file, where + " has no " + key);
      }
    }
    Entry e;
    e.name = name;
    if (!v["dtype"].is_string()) {
      bad(file, where + " has a dtype that is not a string");
    }
    const std::string dt = v["dtype"].get<std::string>();
    uint64_t bytes = 0;
    if (parse_st_dtype(dt, e.dtype)) {
      bytes = st_dtype_size(e.dtype);
    } else if ((bytes = other_dtype_size(dt)) != 0) {
      e.other_dtype = dt; // kept out of `tensors`; the reader of a tensor it needs refuses it
      e.dtype = StDType::u8;
    } else {
      bad(file,
          where + " has unsupported dtype " + dt + " (attn-tune reads " + kStDtypesRead + ")");
    }
    if (!v["shape"].is_array()) {
      bad(file, where + " has a shape that is not an array");
    }
    // numel * itemsize must not wrap: the product is compared with the data size below.
    for (std::size_t d = 0; d < v["shape"].size(); ++d) {
      const uint64_t n =
          non_negative_integer(v["shape"][d], file, where + " shape[" + std::to_string(d) + "]");
      if (n > uint64_t(INT64_MAX) || __builtin_mul_overflow(bytes, n, &bytes)) {
        bad(file, where + " has shape " + v["shape"].dump() + ", too many elements");
      }
      e.shape.push_back(int64_t(n));
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2) {
      bad(file, where + " data_offsets is not a pair [begin, end]");
    }
    e.begin = non_negative_integer(off[0], file, where + " data_offsets begin");
    e.end = non_negative_integer(off[1], file, where + " data_offsets end");
    if (e.begin > e.end) {
      bad(file, where + " data_offsets " + off.dump() + " end before they begin");
    }
    if (e.end > data_size) {
      bad(file, where + " data_offsets " + off.dump() + " reach past the " +
                    std::to_string(data_size) + " data bytes in the file");
    }
    if (e.end - e.begin != bytes) {
      bad(file, where + " data_offsets " + off.dump() + " hold " + std::to_string(e.end - e.begin) +
                    " bytes but dtype " + dt + " and shape " + v["shape"].dump() + " need " +
                    std::to_string(bytes));
    }
    entries.push_back(std::move(e));
  }
  // The format's data section is tensors back to back: no overlaps, no holes, nothing after.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < covered) {
      bad(file, "tensors '" + prev->name + "' and '" + e.name + "' overlap in the data section");
    }
    if (e.begin > covered) {
      bad(file, "data bytes " + std::to_string(covered) + " to " + std::to_string(e.begin) +
                    " belong to no tensor (a hole before '" + e.name + "')");
    }
    covered = e.end;
    prev = &e;
  }
  if (covered != data_size) {
    bad(file, "the data section has " + std::to_string(data_size - covered) +
                  " bytes after the last tensor");
  }
  return entries;
}

// Parses a whole image whose bytes come from `read(offset, count, dst)`, `size` bytes in all.
SafetensorsFile parse_image(uint64_t size, const std::string& file,
                            const std::function<void(uint64_t, uint64_t, void*)>& read) {
  if (size < 8) {
    bad(file,
        "the file has " + std::to_string(size) + " bytes, too short for the 8-byte header length");
  }
  unsigned char len_bytes[8];
  read(0, 8, len_bytes);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | len_bytes[i];
  }
  if (header_len > size - 8) {
    bad(file, "the header length " + std::to_string(header_len) + " is larger than the " +
                  std::to_string(size - 8) + " bytes that follow it");
  }
  if (header_len > kMaxHeaderBytes) {
    bad(file, "the header length " + std::to_string(header_len) + " exceeds the 100 MiB limit");
  }
  std::string header(header_len, '\0');
  read(8, header_len, header.data());
  SafetensorsFile f;
  const uint64_t data_start = 8 + header_len;
  const std::vector<Entry> entries = parse_header(header, size - data_start, file, f.metadata);
  for (const Entry& e : entries) {
    if (!e.other_dtype.empty()) {
      f.skipped.emplace(e.name, e.other_dtype);
      continue;
    }
    StTensor t;
    t.dtype = e.dtype;
    t.shape = e.shape;
    t.data.resize(e.end - e.begin);
    read(data_start + e.begin, e.end - e.begin, t.data.data());
    f.tensors.emplace(e.name, std::move(t));
  }
  return f;
}

} // namespace

const char* st_dtype_name(StDType t) {
  switch (t) {
  case StDType::f16:
    return "F16";
  case StDType::bf16:
    return "BF16";
  case StDType::i32:
    return "I32";
  case StDType::f8_e4m3:
    return "F8_E4M3";
  case StDType::f8_e5m2:
    return "F8_E5M2";
  case StDType::u8:
    return "U8";
  default:
    return "F32";
  }
}

std::size_t st_dtype_size(StDType t) {
  switch (t) {
  case StDType::f16:
  case StDType::bf16:
    return 2;
  case StDType::f8_e4m3:
  case StDType::f8_e5m2:
  case StDType::u8:
    return 1;
  default:
    return 4;
  }
}

int64_t StTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) {
    n *= d;
  }
  return n;
}

SafetensorsFile parse_safetensors(const std::vector<std::byte>& bytes, const std::string& name) {
  return parse_image(bytes.size(), name, [&](uint64_t off, uint64_t n, void* dst) {
    copy_bytes(dst, bytes.data() + off, n);
  });
}

SafetensorsFile read_safetensors(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    bad(path, "not a regular file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    bad(path, std::string("cannot open: ") + std::strerror(errno));
  }
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) {
    bad(path, "cannot determine the file size (not a regular file?)");
  }
  return parse_image(uint64_t(size), path, [&](uint64_t off, uint64_t n, void* dst) {
    in.seekg(std::streamoff(off));
    in.read(static_cast<char*>(dst), std::streamsize(n));
    if (!in || uint64_t(in.gcount()) != n) {
      bad(path,
          "read of " + std::to_string(n) + " bytes at offset " + std::to_string(off) + " failed");
    }
  });
}

std::vector<std::byte> serialize_safetensors(const SafetensorsFile& f) {
  nlohmann::json h = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : f.tensors) {
    if (name == "__metadata__") {
      throw InputError("a tensor cannot be named __metadata__");
    }
    const uint64_t want = uint64_t(t.numel()) * st_dtype_size(t.dtype);
    if (t.data.size() != want) {
      throw InputError("tensor '" + name + "' holds " + std::to_string(t.data.size()) +
                       " bytes, its shape needs " + std::to_string(want));
    }
    h[name] = {{"dtype", st_dtype_name(t.dtype)},
               {"shape", t.shape},
               {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  if (!f.metadata.empty()) {
    h["__metadata__"] = f.metadata;
  }
  std::string header = h.dump();
  // Trailing spaces are legal JSON whitespace; they put the first tensor on an 8-byte boundary.
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<std::byte> out(8 + header.size() + offset);
  uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) {
    out[std::size_t(i)] = std::byte(len & 0xff);
    len >>= 8;
  }
  copy_bytes(out.data() + 8, header.data(), header.size());
  std::byte* p = out.data() + 8 + header.size();
  for (const auto& [name, t] : f.tensors) {
    copy_bytes(p, t.data.data(), t.data.size());
    p += t.data.size();
  }
  return out;
}

void write_safetensors(const std::string& path, const SafetensorsFile& f) {
  const std::vector<std::byte> image = serialize_safetensors(f);
  write_file_atomically(path, image.data(), image.size());
}

StTensor to_st(const HostTensor& t) {
  StTensor s;
  s.dtype = t.dtype == DType::f16        ? StDType::f16
            : t.dtype == DType::bf16     ? StDType::bf16
            : t.dtype == DType::fp8_e4m3 ? StDType::f8_e4m3
            : t.dtype == DType::fp8_e5m2 ? StDType::f8_e5m2
                                         : StDType::f32;
  s.shape = t.shape;
  s.data = t.data;
  return s;
}

StTensor to_st(const std::vector<int32_t>& v, std::vector<int64_t> shape) {
  StTensor s;
  s.dtype = StDType::i32;
  s.shape = std::move(shape);
  s.data.resize(v.size() * 4);
  copy_bytes(s.data.data(), v.data(), s.data.size());
  return s;
}

StTensor to_st(const std::vector<float>& v, std::vector<int64_t> shape) {
  StTensor s;
  s.dtype = StDType::f32;
  s.shape = std::move(shape);
  s.data.resize(v.size() * 4);
  copy_bytes(s.data.data(), v.data(), s.data.size());
  return s;
}

namespace {
DType host_dtype(const StTensor& t, const std::string& name) {
  switch (t.dtype) {
  case StDType::f32:
    return DType::f32;
  case StDType::f16:
    return DType::f16;
  case StDType::bf16:
    return DType::bf16;
  case StDType::f8_e4m3:
    return DType::fp8_e4m3;
  case StDType::f8_e5m2:
    return DType::fp8_e5m2;
  default:
    throw InputError(name + " has dtype " + st_dtype_name(t.dtype) +
                     ", expected F32, F16 or BF16 (or, for an fp8 cache, F8_E4M3 or F8_E5M2)");
  }
}
} // namespace

HostTensor to_host(const StTensor& t, const std::string& name) {
  HostTensor h;
  h.dtype = host_dtype(t, name);
  h.shape = t.shape;
  h.data = t.data;
  return h;
}

HostTensor to_host(StTensor&& t, const std::string& name) {
  HostTensor h;
  h.dtype = host_dtype(t, name);
  h.shape = t.shape;
  h.data = std::move(t.data);
  t.data.clear();
  return h;
}

std::vector<int32_t> to_int32(const StTensor& t, const std::string& name) {
  if (t.dtype != StDType::i32) {
    throw InputError(name + " has dtype " + st_dtype_name(t.dtype) + ", expected I32");
  }
  std::vector<int32_t> v(t.data.size() / 4);
  copy_bytes(v.data(), t.data.data(), v.size() * 4);
  return v;
}

std::vector<float> to_float32(const StTensor& t, const std::string& name) {
  if (t.dtype != StDType::f32) {
    throw InputError(name + " has dtype " + st_dtype_name(t.dtype) + ", expected F32");
  }
  std::vector<float> v(t.data.size() / 4);
  copy_bytes(v.data(), t.data.data(), v.size() * 4);
  return v;
}

} // namespace attn
