// The device registry: make_backend turns a device spec from the command line ("cpu", "cuda:N",
// "N") into a backend, or a one-line reason why that device is not available here.
#include "src/backends/registry.h"

#include <cctype>

#include "src/backends/cpu/cpu_backend.h"
#include "src/backends/cpu/cpu_info.h"
#include "src/backends/cuda/cuda_devices.h"
#include "src/backends/plugin/plugin_backend.h"
#include "src/model/errors.h"

#ifdef ATTN_HAVE_CUDA
#include "src/backends/cuda/cuda_backend.h"
#endif

namespace attn {

int parse_gpu_index(const std::string& spec) {
  std::string digits = spec.rfind("cuda:", 0) == 0 ? spec.substr(5) : spec;
  if (digits.empty() || digits.size() > 6) {
    return -1;
  }
  for (char c : digits) {
    if (!std::isdigit(static_cast<unsigned char>(c))) {
      return -1;
    }
  }
  return std::stoi(digits);
}

std::unique_ptr<Backend> make_backend(const std::string& spec, const BackendOptions& opt) {
  if (!opt.kernels.empty()) {
    return make_plugin_backend(PluginLibrary::open(opt.kernels), spec, opt);
  }
  if (spec == "cpu") {
    return make_cpu_backend(opt);
  }
  const int index = parse_gpu_index(spec);
  if (index < 0) {
    throw InputError("device '" + spec + "' is not 'cpu', 'cuda:N' or a GPU index N");
  }
#ifdef ATTN_HAVE_CUDA
  return make_cuda_backend(index);
#else
  std::string why_none;
  const auto gpus = cuda_devices(why_none);
  std::string msg = "device '" + spec + "' needs the CUDA backend, which this build does not have";
  if (gpus.empty()) {
    msg += "; there is no GPU either: " + why_none;
  } else {
    msg += " (" + std::to_string(gpus.size()) + " GPU(s) present; rebuild with the CUDA Toolkit)";
  }
  throw DeviceUnavailable(msg);
#endif
}

DeviceList list_devices(const BackendOptions& opt) {
  DeviceList l;
  l.devices = cuda_devices(l.why_no_gpu);
  l.devices.push_back(cpu_device_info(opt.threads));
  return l;
}

DeviceChoice default_device(const BackendOptions& opt) {
  const DeviceList l = list_devices(opt);
  for (const auto& d : l.devices) {
    if (d.backend == "cuda") {
      return {d.id, "no --device given: using GPU 0 (" + d.name + ")"};
    }
  }
  return {"cpu", "no --device given: using the CPU backend (no GPU: " +
                     (l.why_no_gpu.empty() ? std::string("none found") : l.why_no_gpu) + ")"};
}

std::string device_slug(const DeviceInfo& d) {
  std::string s = d.backend == "cpu" ? "cpu-" : "";
  bool dash = !s.empty();
  for (char c : d.name) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      s += char(std::tolower(static_cast<unsigned char>(c)));
      dash = false;
    } else if (!dash) {
      s += '-';
      dash = true;
    }
  }
  while (!s.empty() && s.back() == '-') {
    s.pop_back();
  }
  return s.empty() ? "device" : s;
}

} // namespace attn
