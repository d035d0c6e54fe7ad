// `attn-tune plugin check PATH.so`: loads a kernel plugin, prints what it declares, and runs one
// tiny case per family and mask option against the reference (validation/plugin_check), saying
// in plain words what is wrong. The cases are checked runs, so a plugin that crashes is
// reported, not fatal.
#include <cstdio>
#include <memory>
#include <string>

#include "src/backends/registry.h"
#include "src/cli/commands.h"
#include "src/cli/kernels_option.h"
#include "src/model/errors.h"
#include "src/validation/plugin_check.h"

namespace attn::cli {

namespace {

struct PluginCheckOptions {
  std::string path;
  std::string device;
  int threads = 0;
  bool in_process = false;
};

void print_declarations(const PluginLibrary& lib) {
  const PluginIdentity& id = lib.identity();
  std::printf("plugin %s, version %s, plugin ABI %u, %s\n", id.name.c_str(),
              id.version.empty() ? "(none given)" : id.version.c_str(), id.abi_version,
              id.device_kind == ATTN_DEVICE_CUDA ? "CUDA device memory" : "host memory");
  if (!id.python_module.empty()) {
    std::printf("Python module %s (%s), sources sha256 %s\n", id.python_module.c_str(),
                id.python_file.c_str(), id.library_sha256.c_str());
    if (!id.python_sources.empty()) {
      std::printf("  over %s\n",
                  source_files_words(id.python_sources, id.python_sources.size(), 16).c_str());
    }
  } else {
    std::printf("library %s, sha256 %s\n", id.path.c_str(), id.library_sha256.c_str());
  }
  for (const FamilyDecl& f : lib.families()) {
    std::string fp8;
    for (DType kv : f.fp8_kv) {
      fp8 += (fp8.empty() ? "  reads " : ", ") + std::string(dtype_name(kv));
    }
    std::printf("  %-9s  layout %-4s  %s  %zu configurations%s\n", family_name(f.family),
                kv_layout_name(f.layout), f.writes_lse ? "writes lse" : "no lse    ",
                lib.config_space(f.family).size(), fp8.c_str());
    for (const auto& [name, values] : f.params) {
      std::string vs;
      for (int v : values) {
        vs += (vs.empty() ? "" : ", ") + std::to_string(v);
      }
      std::printf("             %s: %s\n", name.c_str(), vs.c_str());
    }
  }
}

int run_plugin_check(const PluginCheckOptions& o) {
  const std::shared_ptr<const PluginLibrary> lib = open_kernels(o.path);
  const BackendOptions bo{.threads = o.threads, .kernels = o.path};
  // A device the kernels cannot run on is refused before anything is printed of them.
  const DeviceChoice choice = choose_device(o.device, lib.get(), bo);
  print_declarations(*lib);
  std::printf("tiny cases (%s):\n", choice.spec.c_str());
  std::fflush(stdout);
  const PluginCheckResult r =
      check_plugin(*lib, choice.spec, bo, o.in_process, [](const std::string& line) {
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
      });
  if (!r.teardown_failure.empty()) {
    std::printf("plugin check: FAIL: after its cases, %s\n", r.teardown_failure.c_str());
    return kExitMismatch;
  }
  if (r.failed == 0) {
    std::printf("plugin check: every family passed its tiny case\n");
    return kExitOk;
  }
  std::printf("plugin check: %d of %d families failed\n", r.failed, r.families);
  return kExitMismatch;
}

} // namespace

Command setup_plugin(CLI::App& root) {
  auto opt = std::make_shared<PluginCheckOptions>();
  CLI::App* sub = root.add_subcommand("plugin", "Inspect a kernel plugin library");
  sub->require_subcommand(1);
  CLI::App* check = sub->add_subcommand(
      "check", "Load a plugin, print what it declares, and run one tiny case per family");
  check
      ->add_option("library", opt->path,
                   "The plugin's shared library (PATH.so), or python:MODULE[:FACTORY] "
                   "(docs/python-kernels.md)")
      ->required()
      ->check(named_kernels());
  check->add_option("--device", opt->device,
                    "cpu for host-memory plugins, cuda:N for CUDA ones (default: by its kind)");
  check->add_option("--threads", opt->threads, "Threads for host-memory plugins (0: all)")
      ->check(CLI::Range(0, 4096));
  check->add_flag("--in-process", opt->in_process,
                  "Run the cases in this process (for debuggers; a crash ends the check)");
  return {sub, [opt] { return run_plugin_check(*opt); }};
}

} // namespace attn::cli
