// NVRTC compilation and its disk cache (see nvrtc_compiler.h). A cache file holds the log
// (for the ptxas report) and the image; it is written to a temporary name and renamed, so
// concurrent tuners never read a half-written file.
#include "src/backends/cuda/nvrtc_compiler.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>

#include <unistd.h>

#include "src/backends/cuda/nvrtc_library.h"

namespace attn::cuda {

namespace {

#define ATTN_NVRTC_CHECK(call)                                                                     \
  do {                                                                                             \
    const nvrtcResult attn_nvrtc_rc = (call);                                                      \
    if (attn_nvrtc_rc != NVRTC_SUCCESS) {                                                          \
      throw std::runtime_error(std::string(#call) +                                                \
                               " failed: " + nvrtc().get_error_string(attn_nvrtc_rc) + " (" +      \
                               __FILE__ + ":" + std::to_string(__LINE__) + ")");                   \
    }                                                                                              \
  } while (0)

constexpr const char* kCacheMagic = "attn-tune-nvrtc-cache 1";

// FNV-1a, 64 bit, with a caller-chosen basis: two bases give two independent-enough hashes
// (one names the file, the other is stored inside it and checked on load).
uint64_t fnv1a(const std::string& s, uint64_t basis) {
  uint64_t h = basis;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Everything that changes the compiled image, with lengths so that no two inputs concatenate
// to the same text.
std::string key_material(const CompileRequest& req) {
  std::ostringstream m;
  auto put = [&m](const std::string& s) { m << s.size() << ':' << s << ';'; };
  put(nvrtc_version());
  put(req.cubin ? "cubin" : "ptx");
  put(std::to_string(req.arch));
  put(req.source_name);
  put(req.source);
  for (const auto& [name, text] : req.headers) {
    put(name);
    put(text);
  }
  for (const auto& o : req.options) {
    put(o);
  }
  return m.str();
}

// NVRTC 12.4 and later take --minimal: no implicit declarations of textures, the device runtime
// or the CUDA runtime's types, none of which the kernels use (they include nothing of CUDA's).
// It makes the same images (checked byte for byte for decode, prefill and the timing helpers on
// sm_80 and sm_90 with NVRTC 13.0) in less time: the decode compile sweep took a fifth less CPU
// time, the prefill one a tenth.
bool nvrtc_has_minimal() {
  static const bool has = [] {
    int major = 0;
    int minor = 0;
    return nvrtc().version(&major, &minor) == NVRTC_SUCCESS &&
           (major > 12 || (major == 12 && minor >= 4));
  }();
  return has;
}

std::vector<std::string> full_options(const CompileRequest& req) {
  std::vector<std::string> opts = req.options;
  if (nvrtc_has_minimal()) {
    opts.push_back("--minimal");
  }
  const std::string sm = std::to_string(req.arch);
  if (req.cubin) {
    opts.push_back("-arch=sm_" + sm);
    opts.push_back("--ptxas-options=-v");
  } else {
    opts.push_back("-arch=compute_" + sm);
  }
  return opts;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) {
    s += (s.empty() ? "" : " ") + x;
  }
  return s;
}

// Owns an nvrtcProgram so that every exit path destroys it.
struct Program {
  nvrtcProgram p = nullptr;
  ~Program() {
    if (p != nullptr) {
      nvrtc().destroy_program(&p);
    }
  }
};

} // namespace

std::string nvrtc_version() {
  int major = 0;
  int minor = 0;
  ATTN_NVRTC_CHECK(nvrtc().version(&major, &minor));
  return std::to_string(major) + "." + std::to_string(minor);
}

std::optional<std::filesystem::path> default_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::filesystem::path(xdg) / "attn-tune";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::filesystem::path(home) / ".cache" / "attn-tune";
  }
  // A batch job or a container may have neither: compile once per machine all the same, in a
  // per-user temporary folder, and say where (once per process).
  std::error_code ec;
  const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  if (ec) {
    return std::nullopt;
  }
  const std::filesystem::path dir = tmp / ("attn-tune-" + std::to_string(::getuid()));
  static std::once_flag said;
  std::call_once(said, [&dir] {
    std::fprintf(stderr,
                 "attn-tune: note: neither XDG_CACHE_HOME nor HOME is set; compiled kernels are "
                 "cached in %s\n",
                 dir.c_str());
  });
  return dir;
}

std::vector<KernelResources> parse_ptxas_report(const std::string& log) {
  // ptxas -v prints, per function:
  //   ptxas info    : Compiling entry function 'decode_v1' for 'sm_90'
  //   ptxas info    : Function properties for decode_v1
  //       0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
  //   ptxas info    : Used 40 registers, used 1 barriers, 1056 bytes smem, 400 bytes cmem[0]
  static const std::regex entry_re(R"(Compiling entry function '([^']+)')");
  static const std::regex props_re(R"(Function properties for (\S+))");
  static const std::regex frame_re(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used_re(R"(Used (\d+) registers)");
  static const std::regex smem_re(R"((\d+) bytes smem)");
  std::vector<KernelResources> out;
  auto find = [&out](const std::string& name) -> KernelResources& {
    for (auto& k : out) {
      if (k.name == name) {
        return k;
      }
    }
    out.push_back({});
    out.back().name = name;
    return out.back();
  };
  std::istringstream in(log);
  std::string line;
  std::string current;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, entry_re) || std::regex_search(line, m, props_re)) {
      current = m[1];
      find(current);
    } else if (!current.empty() && std::regex_search(line, m, frame_re)) {
      auto& k = find(current);
      k.stack_bytes = std::stoi(m[1]);
      k.spill_store_bytes = std::stoi(m[2]);
      k.spill_load_bytes = std::stoi(m[3]);
    } else if (!current.empty() && std::regex_search(line, m, used_re)) {
      auto& k = find(current);
      k.registers = std::stoi(m[1]);
      if (std::regex_search(line, m, smem_re)) {
        k.smem_bytes = std::stoi(m[1]);
      }
    }
  }
  return out;
}

NvrtcCompiler::NvrtcCompiler(std::optional<std::filesystem::path> cache_dir)
    : dir_(std::move(cache_dir)) {}

std::string NvrtcCompiler::cache_key(const CompileRequest& req) {
  const std::string material = key_material(req);
  return hex64(fnv1a(material, 0xcbf29ce484222325ull)) + "-" + hex64(material.size());
}

CompileResult NvrtcCompiler::compile(const CompileRequest& req) const {
  const std::string key = cache_key(req);
  if (auto hit = load_cached(key)) {
    return *hit;
  }
  const std::vector<std::string> opts = full_options(req);
  std::vector<const char*> opt_ptrs;
  for (const auto& o : opts) {
    opt_ptrs.push_back(o.c_str());
  }
  std::vector<const char*> header_texts;
  std::vector<const char*> header_names;
  for (const auto& [name, text] : req.headers) {
    header_names.push_back(name.c_str());
    header_texts.push_back(text.c_str());
  }
  const NvrtcApi& api = nvrtc();
  Program prog;
  ATTN_NVRTC_CHECK(api.create_program(&prog.p, req.source.c_str(), req.source_name.c_str(),
                                      int(header_texts.size()), header_texts.data(),
                                      header_names.data()));
  const nvrtcResult rc = api.compile_program(prog.p, int(opt_ptrs.size()), opt_ptrs.data());
  CompileResult r;
  std::size_t log_size = 0;
  ATTN_NVRTC_CHECK(api.get_program_log_size(prog.p, &log_size));
  r.log.resize(log_size);
  ATTN_NVRTC_CHECK(api.get_program_log(prog.p, r.log.data()));
  while (!r.log.empty() && r.log.back() == '\0') {
    r.log.pop_back();
  }
  if (rc != NVRTC_SUCCESS) {
    throw CompileError("NVRTC could not compile " + req.source_name + " for " +
                       (req.cubin ? "sm_" : "compute_") + std::to_string(req.arch) + " (" +
                       req.description + "; " + api.get_error_string(rc) +
                       "); options: " + join(opts) + "\ncompiler log:\n" + r.log);
  }
  std::size_t size = 0;
  if (req.cubin) {
    ATTN_NVRTC_CHECK(api.get_cubin_size(prog.p, &size));
    r.image.resize(size);
    ATTN_NVRTC_CHECK(api.get_cubin(prog.p, r.image.data()));
  } else {
    ATTN_NVRTC_CHECK(api.get_ptx_size(prog.p, &size));
    r.image.resize(size);
    ATTN_NVRTC_CHECK(api.get_ptx(prog.p, r.image.data()));
  }
  r.kernels = parse_ptxas_report(r.log);
  r.cache_key = key;
  store_cached(key, r);
  return r;
}

std::optional<CompileResult> NvrtcCompiler::load_cached(const std::string& key) const {
  if (!dir_) {
    return std::nullopt;
  }
  std::ifstream in(*dir_ / (key + ".bin"), std::ios::binary);
  if (!in) {
    return std::nullopt;
  }
  std::string magic;
  std::string check;
  std::size_t log_size = 0;
  std::size_t image_size = 0;
  if (!std::getline(in, magic) || magic != kCacheMagic ||
      !(in >> check >> log_size >> image_size) || in.get() != '\n' ||
      check != hex64(fnv1a(key, 0x84222325cbf29ce4ull))) {
    return std::nullopt; // another format or a damaged file: recompile and overwrite
  }
  CompileResult r;
  r.log.resize(log_size);
  r.image.resize(image_size);
  if (!in.read(r.log.data(), std::streamsize(log_size)) ||
      !in.read(r.image.data(), std::streamsize(image_size)) || in.peek() != EOF) {
    return std::nullopt;
  }
  r.kernels = parse_ptxas_report(r.log);
  r.from_cache = true;
  r.cache_key = key;
  return r;
}

void NvrtcCompiler::store_cached(const std::string& key, const CompileResult& r) const {
  if (!dir_) {
    return;
  }
  // The cache only saves time: a directory we cannot write leaves compiles uncached.
  std::error_code ec;
  std::filesystem::create_directories(*dir_, ec);
  if (ec) {
    return;
  }
  static std::atomic<unsigned> counter{0};
  const auto final_path = *dir_ / (key + ".bin");
  const auto tmp_path = *dir_ / (key + ".tmp." + std::to_string(::getpid()) + "." +
                                 std::to_string(counter.fetch_add(1)));
  {
    std::ofstream out(tmp_path, std::ios::binary | std::ios::trunc);
    if (!out) {
      return;
    }
    out << kCacheMagic << '\n'
        << hex64(fnv1a(key, 0x84222325cbf29ce4ull)) << ' ' << r.log.size() << ' ' << r.image.size()
        << '\n';
    out.write(r.log.data(), std::streamsize(r.log.size()));
    out.write(r.image.data(), std::streamsize(r.image.size()));
    if (!out.flush()) {
      out.close();
      std::filesystem::remove(tmp_path, ec);
      return;
    }
  }
  std::filesystem::rename(tmp_path, final_path, ec);
  if (ec) {
    std::filesystem::remove(tmp_path, ec);
  }
}

} // namespace attn::cuda
