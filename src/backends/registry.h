// The registry of kernel sets, and the one place a command's device is chosen: a device spec
// (--device) and a kernels spec (--kernels) become a Backend through a flat table of the kernel
// sets this build can open (the built-in kernels on the CPU or a GPU, a plugin on either); when
// no device is named, the default and the sentence that explains it (including why there is no
// GPU) come from here too.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/backends/backend.h"
#include "src/backends/plugin/plugin_library.h"

namespace attn {

// "cpu", "cuda:N" or a bare GPU index "N"; with opt.kernels set, the kernels of that plugin (or
// python:MODULE) on that device. Throws DeviceUnavailable (with the reason) when the device is
// not there, InputError when the spec is malformed or the kernels cannot run on that kind of
// device.
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

// The device a command runs on and the sentence it prints about that choice (empty when the
// device was named).
struct DeviceChoice {
  std::string spec;
  std::string said;
};
// `given` when set (InputError when a plugin cannot run there); else for a plugin its kind of
// device (the CPU for host-memory plugins, GPU 0 for CUDA ones); else GPU 0 when there is one,
// else the CPU, saying why there is no GPU.
[[nodiscard]] DeviceChoice choose_device(const std::string& given, const PluginLibrary* lib,
                                         const BackendOptions& opt);
// InputError when `lib`'s kernels cannot run on device `spec` (host-memory kernels on a GPU, or
// CUDA ones on the CPU), naming the device to use.
void check_plugin_device(const PluginLibrary& lib, const std::string& spec);
// The devices `verify --device all` checks: every GPU, then the CPU.
[[nodiscard]] std::vector<std::string> every_device(const BackendOptions& opt);
// The device `spec` names on this machine ("" or "cuda:N", "N", "cpu"; "" is the default
// device); nullopt when it is not here.
[[nodiscard]] std::optional<DeviceInfo> find_device(const std::string& spec);

// "plugin NAME VERSION (PATH)" or "the built-in kernels", for progress lines.
[[nodiscard]] std::string kernels_phrase(const PluginLibrary* lib);

// "nvidia-h200", "cpu-intel-xeon-platinum-8480": a file-name-safe device name.
[[nodiscard]] std::string device_slug(const DeviceInfo& d);

} // namespace attn
