// Run-time loading of NVRTC (see nvrtc_library.h). The names below come from CMake, from the
// toolkit the headers belong to, so the loaded library matches the declarations used here.
#include "src/backends/cuda/nvrtc_library.h"

#include <dlfcn.h>

#include "src/model/errors.h"

#ifndef ATTN_NVRTC_SONAME
#error "ATTN_NVRTC_SONAME (e.g. \"libnvrtc.so.13\") is set by CMakeLists.txt"
#endif
#if !defined(ATTN_NVRTC_APT_PACKAGE) || !defined(ATTN_NVRTC_PIP_LIB_DIR)
#error "ATTN_NVRTC_APT_PACKAGE and ATTN_NVRTC_PIP_LIB_DIR are set by CMakeLists.txt"
#endif

namespace attn::cuda {

namespace {

std::string last_dl_error() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown loader error";
}

// Resolves `name` into `fn`; returns the loader's error, empty on success.
template <typename Fn> std::string resolve(void* lib, const char* name, Fn& fn) {
  (void)dlerror(); // a null symbol is only an error when dlerror says so
  void* sym = dlsym(lib, name);
  if (sym == nullptr) {
    return std::string(name) + " not found: " + last_dl_error();
  }
  fn = reinterpret_cast<Fn>(sym);
  return {};
}

// Fills every entry point from `lib`; returns the first that is missing, empty on success.
std::string resolve_all(void* lib, NvrtcApi& api) {
  std::string err;
  auto take = [&err, lib](const char* name, auto& fn) {
    if (err.empty()) {
      err = resolve(lib, name, fn);
    }
  };
  take("nvrtcGetErrorString", api.get_error_string);
  take("nvrtcVersion", api.version);
  take("nvrtcGetNumSupportedArchs", api.get_num_supported_archs);
  take("nvrtcGetSupportedArchs", api.get_supported_archs);
  take("nvrtcCreateProgram", api.create_program);
  take("nvrtcDestroyProgram", api.destroy_program);
  take("nvrtcCompileProgram", api.compile_program);
  take("nvrtcGetProgramLogSize", api.get_program_log_size);
  take("nvrtcGetProgramLog", api.get_program_log);
  take("nvrtcGetPTXSize", api.get_ptx_size);
  take("nvrtcGetPTX", api.get_ptx);
  take("nvrtcGetCUBINSize", api.get_cubin_size);
  take("nvrtcGetCUBIN", api.get_cubin);
  return err;
}

} // namespace

std::vector<std::string> nvrtc_library_candidates() {
  std::vector<std::string> names{ATTN_NVRTC_SONAME};
#ifdef ATTN_NVRTC_TOOLKIT_PATH
  names.emplace_back(ATTN_NVRTC_TOOLKIT_PATH);
#endif
  return names;
}

NvrtcApi load_nvrtc(const std::vector<std::string>& candidates) {
  std::string errors;
  for (const std::string& name : candidates) {
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      errors += (errors.empty() ? "" : "; ") + last_dl_error();
      continue;
    }
    NvrtcApi api;
    if (std::string missing = resolve_all(lib, api); !missing.empty()) {
      dlclose(lib);
      errors += (errors.empty() ? "" : "; ") + name + " is not a usable NVRTC: " + missing;
      continue;
    }
    api.path = name;
    return api; // never closed: compiled programs and error strings point into the library
  }
  throw DeviceUnavailable(
      "the CUDA backend needs NVRTC (" ATTN_NVRTC_SONAME ", the CUDA runtime compiler) and "
      "could not load it (" +
      (errors.empty() ? std::string("no library names to try") : errors) +
      "); install it with the package " ATTN_NVRTC_APT_PACKAGE
      " from NVIDIA's CUDA repository, or `pip install nvidia-cuda-nvrtc` and add its "
      "site-packages/" ATTN_NVRTC_PIP_LIB_DIR " folder to LD_LIBRARY_PATH");
}

const NvrtcApi& nvrtc() {
  // Process-wide on purpose: the library is loaded once for every compiler and backend.
  static const NvrtcApi api = load_nvrtc(nvrtc_library_candidates());
  return api;
}

} // namespace attn::cuda
