// The device registry: the devices this build can use, the default one, a backend for a device
// spec from the command line, and the file-name-safe name tables are published under.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/backends/backend.h"

namespace attn {

// The GPU index of "cuda:N" or "N"; -1 when spec is neither.
[[nodiscard]] int parse_gpu_index(const std::string& spec);

// "cpu", "cuda:N" or a bare GPU index "N"; with opt.kernels set, the kernels of that plugin
// (src/backends/plugin) on that device. Throws DeviceUnavailable (with the reason) when the
// device is not there, InputError when the spec is malformed.
[[nodiscard]] std::unique_ptr<Backend> make_backend(const std::string& spec,
                                                    const BackendOptions& opt);
// make_backend's signature, for commands that take the factory as a parameter (tests plant a
// faulty backend through it).
using BackendFactory =
    std::function<std::unique_ptr<Backend>(const std::string& spec, const BackendOptions& opt)>;

// Every device this build can use, for `attn-tune devices`; `why_no_gpu` is filled when there
// is no usable GPU (no driver, no device, built without CUDA).
struct DeviceList {
  std::vector<DeviceInfo> devices;
  std::string why_no_gpu;
};
[[nodiscard]] DeviceList list_devices(const BackendOptions& opt);

// The device a command uses when none is named: GPU 0 when there is one, else the CPU; `said`
// is the sentence the command prints about that choice.
struct DeviceChoice {
  std::string spec;
  std::string said;
};
[[nodiscard]] DeviceChoice default_device(const BackendOptions& opt);

// "nvidia-h200", "cpu-intel-xeon-platinum-8480": a file-name-safe device name.
[[nodiscard]] std::string device_slug(const DeviceInfo& d);

} // namespace attn
