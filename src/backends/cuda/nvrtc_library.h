// NVRTC, the CUDA runtime compiler, loaded at run time (dlopen) rather than linked: the binary
// starts without it, and only a GPU command that needs it fails, naming the library and package.
#pragma once
#include <string>
#include <vector>

#include <nvrtc.h>

namespace attn::cuda {

// The NVRTC entry points the CUDA backend calls; the types come from nvrtc.h at build time.
struct NvrtcApi {
  decltype(&::nvrtcGetErrorString) get_error_string = nullptr;
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetNumSupportedArchs) get_num_supported_archs = nullptr;
  decltype(&::nvrtcGetSupportedArchs) get_supported_archs = nullptr;
  decltype(&::nvrtcCreateProgram) create_program = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy_program = nullptr;
  decltype(&::nvrtcCompileProgram) compile_program = nullptr;
  decltype(&::nvrtcGetProgramLogSize) get_program_log_size = nullptr;
  decltype(&::nvrtcGetProgramLog) get_program_log = nullptr;
  decltype(&::nvrtcGetPTXSize) get_ptx_size = nullptr;
  decltype(&::nvrtcGetPTX) get_ptx = nullptr;
  decltype(&::nvrtcGetCUBINSize) get_cubin_size = nullptr;
  decltype(&::nvrtcGetCUBIN) get_cubin = nullptr;
  std::string path; // the name or path that loaded
};

// Where NVRTC is looked for, in order: the soname of the toolkit built against (found through
// the loader's search path), then that library in the toolkit's folder found at configure time.
[[nodiscard]] std::vector<std::string> nvrtc_library_candidates();

// Loads the first of `candidates` that opens and resolves every entry point. Throws
// DeviceUnavailable, in one line, naming the library, each loader error and the packages that
// bring NVRTC. A loaded library stays loaded for the life of the process.
[[nodiscard]] NvrtcApi load_nvrtc(const std::vector<std::string>& candidates);

// The process's NVRTC, loaded from nvrtc_library_candidates() on first use (thread-safe); a
// failed load throws as load_nvrtc does and is tried again on the next call.
[[nodiscard]] const NvrtcApi& nvrtc();

} // namespace attn::cuda
