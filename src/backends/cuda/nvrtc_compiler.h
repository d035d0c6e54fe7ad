// Run-time compilation of kernel sources with NVRTC for one GPU architecture, with a disk cache
// keyed by source, headers, options, architecture and NVRTC version; works without a GPU.
#pragma once
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace attn::cuda {

// A compilation that NVRTC rejected; what() holds the configuration and the compiler log.
class CompileError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct CompileRequest {
  std::string source_name; // name NVRTC shows in diagnostics, e.g. "decode.cuh"
  std::string source;
  // Headers the source may #include, by include name ("attn_math.h") and text.
  std::vector<std::pair<std::string, std::string>> headers;
  std::vector<std::string> options; // -D..., -std=... (the architecture is added from `arch`)
  int arch = 80;                    // compute capability as major*10 + minor: 80 -> sm_80
  bool cubin = true;                // true: SASS for sm_XX (with a ptxas report); false: PTX
  std::string description;          // the configuration, for error messages
};

// What ptxas reported for one kernel of a cubin.
struct KernelResources {
  std::string name;
  int registers = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int stack_bytes = 0; // local memory frame per thread
  int smem_bytes = 0;  // static shared memory
};

struct CompileResult {
  std::vector<char> image; // cubin or PTX (NUL-terminated)
  std::string log;         // NVRTC log, ptxas report included
  std::vector<KernelResources> kernels;
  bool from_cache = false;
  std::string cache_key;
};

// Parses the "ptxas info" lines of a compile log into one entry per function.
[[nodiscard]] std::vector<KernelResources> parse_ptxas_report(const std::string& log);

// "13.0" for NVRTC 13.0.
[[nodiscard]] std::string nvrtc_version();

// $XDG_CACHE_HOME/attn-tune, else $HOME/.cache/attn-tune, else (saying so on stderr once)
// <temp dir>/attn-tune-<uid>; nullopt only when there is no temp dir either.
[[nodiscard]] std::optional<std::filesystem::path> default_cache_dir();

class NvrtcCompiler {
public:
  // No cache directory: every compile runs NVRTC.
  explicit NvrtcCompiler(std::optional<std::filesystem::path> cache_dir = default_cache_dir());

  // Compiles (or loads from the cache); throws CompileError when NVRTC rejects the source.
  [[nodiscard]] CompileResult compile(const CompileRequest& req) const;

  // The key the cache files are named by (hex), exposed for tests.
  [[nodiscard]] static std::string cache_key(const CompileRequest& req);
  [[nodiscard]] const std::optional<std::filesystem::path>& cache_dir() const { return dir_; }

private:
  [[nodiscard]] std::optional<CompileResult> load_cached(const std::string& key) const;
  void store_cached(const std::string& key, const CompileResult& r) const;

  std::optional<std::filesystem::path> dir_;
};

} // namespace attn::cuda
