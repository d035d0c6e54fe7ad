// The registry: one table row per kernel set this build can open, keyed by where its kernels
// come from (built in, a plugin) and the memory they run in (host, CUDA); make_backend parses the
// device, finds the row and opens it.
#include "src/backends/registry.h"

#include <cctype>

#include "src/backends/cpu/cpu_backend.h"
#include "src/backends/cuda/cuda_devices.h"
#include "src/backends/host/host_info.h"
#include "src/backends/plugin/plugin_backend.h"
#include "src/model/errors.h"

#ifdef ATTN_HAVE_CUDA
#include "src/backends/cuda/cuda_backend.h"
#endif

namespace attn {

namespace {

// A device as the command line names it.
struct DeviceSpec {
  MemoryKind memory = MemoryKind::host;
  int gpu = -1; // the GPU index of a CUDA device
};

DeviceSpec parse_device(const std::string& spec) {
  if (spec == "cpu") {
    return {MemoryKind::host, -1};
  }
  std::string digits = spec.rfind("cuda:", 0) == 0 ? spec.substr(5) : spec;
  bool ok = !digits.empty() && digits.size() <= 6;
  for (char c : digits) {
    ok = ok && std::isdigit(static_cast<unsigned char>(c));
  }
  if (!ok) {
    throw InputError("device '" + spec + "' is not 'cpu', 'cuda:N' or a GPU index N");
  }
  return {MemoryKind::cuda, std::stoi(digits)};
}

#ifndef ATTN_HAVE_CUDA
// Why the CUDA kernels of this build cannot be opened: the build has no CUDA backend.
[[noreturn]] void no_cuda_backend(const std::string& spec) {
  std::string why_none;
  const auto gpus = cuda_devices(why_none);
  std::string msg = "device '" + spec + "' needs the CUDA backend, which this build does not have";
  if (gpus.empty()) {
    msg += "; there is no GPU either: " + why_none;
  } else {
    msg += " (" + std::to_string(gpus.size()) + " GPU(s) present; rebuild with the CUDA Toolkit)";
  }
  throw DeviceUnavailable(msg);
}
#endif

using Opener = std::unique_ptr<Backend> (*)(const DeviceSpec&, const std::string& spec,
                                            const BackendOptions&,
                                            std::shared_ptr<const PluginLibrary>);

struct KernelSetRow {
  bool plugin;       // kernels from --kernels, else the built-in ones
  MemoryKind memory; // where they run
  Opener open;
};

// The kernel sets, one row each. A new kind of kernel set is one row and its opener.
const KernelSetRow kKernelSets[] = {
    {false, MemoryKind::host,
     [](const DeviceSpec&, const std::string&, const BackendOptions& o,
        std::shared_ptr<const PluginLibrary>) { return make_cpu_backend(o); }},
    {false, MemoryKind::cuda,
     [](const DeviceSpec& d, const std::string& spec, const BackendOptions&,
        std::shared_ptr<const PluginLibrary>) -> std::unique_ptr<Backend> {
#ifdef ATTN_HAVE_CUDA
       (void)spec;
       return make_cuda_backend(d.gpu);
#else
       (void)d;
       no_cuda_backend(spec);
#endif
     }},
    {true, MemoryKind::host,
     [](const DeviceSpec&, const std::string&, const BackendOptions& o,
        std::shared_ptr<const PluginLibrary> lib) {
       return make_host_plugin_backend(std::move(lib), o.threads);
     }},
    {true, MemoryKind::cuda,
     [](const DeviceSpec& d, const std::string&, const BackendOptions&,
        std::shared_ptr<const PluginLibrary> lib) -> std::unique_ptr<Backend> {
#ifdef ATTN_HAVE_CUDA
       return make_cuda_plugin_backend(std::move(lib), d.gpu);
#else
       (void)d;
       throw DeviceUnavailable("plugin " + lib->identity().name +
                               " runs on CUDA devices, and this build has no CUDA backend");
#endif
     }},
};

} // namespace

std::unique_ptr<Backend> make_backend(const std::string& spec, const BackendOptions& opt) {
  std::shared_ptr<const PluginLibrary> lib;
  if (!opt.kernels.empty()) {
    lib = PluginLibrary::open(opt.kernels);
  }
  if (lib) {
    check_plugin_device(*lib, spec);
  }
  const DeviceSpec dev = parse_device(spec);
  for (const KernelSetRow& row : kKernelSets) {
    if (row.plugin == bool(lib) && row.memory == dev.memory) {
      return row.open(dev, spec, opt, std::move(lib));
    }
  }
  throw InputError("no kernel set runs on device '" + spec + "'");
}

DeviceList list_devices(const BackendOptions& opt) {
  DeviceList l;
  l.devices = cuda_devices(l.why_no_gpu);
  l.devices.push_back(cpu_device_info(opt.threads));
  return l;
}

void check_plugin_device(const PluginLibrary& lib, const std::string& spec) {
  const PluginIdentity& id = lib.identity();
  const bool host = lib.declaration().memory == MemoryKind::host;
  if (host && spec != "cpu") {
    throw InputError("plugin " + id.name + " runs on host memory: use --device cpu, not '" + spec +
                     "'");
  }
  if (!host && spec == "cpu") {
    throw InputError("plugin " + id.name + " runs on CUDA devices: use --device cuda:N, not 'cpu'");
  }
}

DeviceChoice choose_device(const std::string& given, const PluginLibrary* lib,
                           const BackendOptions& opt) {
  if (!given.empty()) {
    if (lib != nullptr) {
      check_plugin_device(*lib, given); // refused before the command prints or starts anything
    }
    return {given, ""};
  }
  if (lib != nullptr) {
    const bool host = lib->declaration().memory == MemoryKind::host;
    return {host ? "cpu" : "cuda:0", "no --device given: plugin " + lib->identity().name +
                                         " runs on " +
                                         (host ? std::string("host memory: using the CPU")
                                               : std::string("CUDA devices: using GPU 0"))};
  }
  const DeviceList l = list_devices(opt);
  for (const auto& d : l.devices) {
    if (d.backend == "cuda") {
      return {d.id, "no --device given: using GPU 0 (" + d.name + ")"};
    }
  }
  return {"cpu", "no --device given: using the CPU backend (no GPU: " +
                     (l.why_no_gpu.empty() ? std::string("none found") : l.why_no_gpu) + ")"};
}

std::vector<std::string> every_device(const BackendOptions& opt) {
  std::vector<std::string> specs;
  for (const auto& d : list_devices(opt).devices) {
    specs.push_back(d.id);
  }
  return specs;
}

std::optional<DeviceInfo> find_device(const std::string& spec) {
  const DeviceList l = list_devices({});
  std::string id = spec;
  if (!id.empty() && std::isdigit(static_cast<unsigned char>(id[0]))) {
    id = "cuda:" + id;
  }
  for (const auto& d : l.devices) {
    if (id.empty() ? true : d.id == id) {
      return d;
    }
  }
  return std::nullopt;
}

std::string kernels_phrase(const PluginLibrary* lib) {
  if (lib == nullptr) {
    return "the built-in kernels";
  }
  const PluginIdentity& id = lib->identity();
  return "plugin " + id.name + (id.version.empty() ? "" : " " + id.version) + " (" + id.path + ")";
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
