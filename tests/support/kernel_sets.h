// The kernel sets a test can run, as one table: the built-in kernels and every plugin and Python
// module the project ships, on the device each runs on, and how to open one (or why it cannot
// run here). Adding a kernel set to the conformance suite is one line in kernel_sets().
#pragma once
#include <cstdlib>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "src/backends/registry.h"
#include "src/model/errors.h"

namespace attn::test {

// What BackendOptions::kernels takes for a kernel set, or why this build cannot offer it.
struct KernelsSource {
  std::string spec;    // "": the built-in kernels; a plugin library's path; python:MODULE
  std::string missing; // empty when this build has the kernels
};

[[nodiscard]] inline KernelsSource builtin_kernels() { return {}; }

// A plugin's path from the environment variable `var`, when set: a test binary copied away from
// its build folder (scripts/device-check.sh runs prebuilt ones) is told where its plugins are.
[[nodiscard]] inline const char* plugin_path_override(const char* var) {
  const char* v = std::getenv(var);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// The plugin libraries come from CMake as compile definitions (tests/CMakeLists.txt), only to the
// test executables that ask for them; ATTN_TEST_CPU_EXAMPLE_PLUGIN and
// ATTN_TEST_CUDA_EXAMPLE_PLUGIN override them.
[[nodiscard]] inline KernelsSource cpu_example_plugin() {
#ifdef ATTN_CPU_EXAMPLE_PLUGIN
  if (const char* p = plugin_path_override("ATTN_TEST_CPU_EXAMPLE_PLUGIN")) {
    return {p, ""};
  }
  return {ATTN_CPU_EXAMPLE_PLUGIN, ""};
#else
  return {"", "this test executable is not given plugins/cpu_example (tests/CMakeLists.txt)"};
#endif
}

[[nodiscard]] inline KernelsSource cuda_example_plugin() {
#ifdef ATTN_CUDA_EXAMPLE_PLUGIN
  if (const char* p = plugin_path_override("ATTN_TEST_CUDA_EXAMPLE_PLUGIN")) {
    return {p, ""};
  }
  return {ATTN_CUDA_EXAMPLE_PLUGIN, ""};
#else
  return {"", "plugins/cuda_example is not built here (it needs the CUDA backend and a working "
              "nvcc; sanitized builds leave it out)"};
#endif
}

// A module run through the Python bridge; attn-tune's own python/ folder is on its path.
[[nodiscard]] inline KernelsSource python_kernels(const std::string& module) {
#if defined(ATTN_TEST_PYTHON_KERNELS)
  return {"python:" + module, ""};
#elif defined(ATTN_TEST_NO_PYTHON_KERNELS)
  return {"python:" + module, ATTN_TEST_NO_PYTHON_KERNELS};
#else
  return {"python:" + module, "this test executable is not told whether the build has the Python "
                              "bridge (tests/CMakeLists.txt)"};
#endif
}

struct KernelSet {
  std::string name;      // names the test: letters, digits and '_'
  std::string device;    // make_backend's device spec
  KernelsSource kernels; // and its kernels spec
};

// Every kernel set the project ships. The ones a machine or build lacks stay in the table and
// are skipped with the reason, so that a test's output says what it did not check.
[[nodiscard]] inline std::vector<KernelSet> kernel_sets() {
  return {
      {"cpu", "cpu", builtin_kernels()},
      {"cpu_example_plugin", "cpu", cpu_example_plugin()},
      {"python_attn_tune_torch", "cpu", python_kernels("attn_tune_torch")},
      {"cuda", "cuda:0", builtin_kernels()},
      {"cuda_example_plugin", "cuda:0", cuda_example_plugin()},
  };
}

// What a kernel set needs of the machine, which picks its CTest labels: GPU sets carry `gpu`,
// Python ones `python`.
enum class KernelSetKind { host, python, gpu };

[[nodiscard]] inline KernelSetKind kind_of(const KernelSet& set) {
  if (set.device != "cpu") {
    return KernelSetKind::gpu;
  }
  return set.kernels.spec.rfind("python:", 0) == 0 ? KernelSetKind::python : KernelSetKind::host;
}

[[nodiscard]] inline std::vector<KernelSet> kernel_sets(KernelSetKind kind) {
  std::vector<KernelSet> out;
  for (KernelSet& s : kernel_sets()) {
    if (kind_of(s) == kind) {
      out.push_back(std::move(s));
    }
  }
  return out;
}

// A kernel set opened for a test: its backend, or why it cannot run here (no GPU, not built).
struct OpenedKernelSet {
  std::unique_ptr<Backend> backend;
  std::string unavailable;
};

// Only a missing build and a missing device are reasons to skip: any other error opening the
// set (a plugin that does not load, a Python module that does not import) is thrown.
[[nodiscard]] inline OpenedKernelSet open_kernel_set(const KernelSet& set, int threads) {
  if (!set.kernels.missing.empty()) {
    return {nullptr, set.kernels.missing};
  }
  try {
    return {make_backend(set.device, {.threads = threads, .kernels = set.kernels.spec}), ""};
  } catch (const DeviceUnavailable& e) {
    return {nullptr, e.what()};
  }
}

// The `attn-tune` flags that open the same kernel set: `--device cpu --kernels PATH`.
[[nodiscard]] inline std::string cli_flags(const KernelSet& set) {
  std::string s = "--device " + set.device;
  if (!set.kernels.spec.empty()) {
    s += " --kernels " + set.kernels.spec;
  }
  return s;
}

// For GoogleTest's messages about a parameter.
inline std::ostream& operator<<(std::ostream& os, const KernelSet& set) {
  return os << set.name << " (" << cli_flags(set) << ")";
}

} // namespace attn::test
