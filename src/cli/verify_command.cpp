// `attn-tune verify`: the correctness gate CI systems run. Exit codes: 0 all passed, 1 a case
// failed or faulted (or nothing could be checked), 2 usage error, 3 the requested device does
// not exist. The checks run in supervised worker processes, so a crashing kernel is one failed
// case, not the end of the gate.
#include "src/cli/verify_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "src/backends/backend.h"
#include "src/backends/cpu/isa.h"
#include "src/backends/registry.h"
#include "src/cli/commands.h"
#include "src/cli/exit_codes.h"
#include "src/cli/kernels_option.h"
#include "src/cli/output_option.h"
#include "src/io/atomic_file.h"
#include "src/io/stop_signals.h"
#include "src/model/errors.h"
#include "src/validation/junit.h"
#include "src/validation/verify.h"

namespace attn::cli {

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) {
      out.push_back(item);
    }
  }
  return out;
}

// A comma-separated list option given with no name in it ("--kv-dtypes ''") is refused rather
// than taken as the option left out (all).
CLI::Validator names_given() {
  return CLI::Validator(
      [](std::string& s) {
        return split_list(s).empty() ? std::string("needs at least one name") : std::string();
      },
      "LIST");
}

// "what the failures look like": for each device and configuration with failures, the
// explanations verify found (diagnose_failure, errors, faults) and how many cases each covers,
// most frequent first, so that a reader sees the defects without reading every line.
void print_failure_causes(std::FILE* out, const std::vector<VerifyReport>& reports) {
  struct Row {
    int failed = 0;
    std::map<std::string, int> causes;
  };
  std::map<std::string, Row> rows; // "device config" in first-seen order is not needed
  std::vector<std::string> order;
  for (const auto& r : reports) {
    for (const auto& tc : r.testcases) {
      if (tc.failed == 0 || tc.interruption) {
        continue;
      }
      const std::string key = tc.device + " " + tc.config;
      if (!rows.count(key)) {
        order.push_back(key);
      }
      Row& row = rows[key];
      row.failed += tc.failed;
      for (const auto& [cause, n] : tc.causes) {
        row.causes[cause] += n;
      }
    }
  }
  std::fprintf(out, "what the failures look like:\n");
  for (const auto& key : order) {
    const Row& row = rows[key];
    std::vector<std::pair<int, std::string>> sorted;
    int explained = 0;
    for (const auto& [cause, n] : row.causes) {
      sorted.emplace_back(n, cause);
      explained += n;
    }
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    std::fprintf(out, "  %s: %d failed\n", key.c_str(), row.failed);
    for (const auto& [n, cause] : sorted) {
      std::fprintf(out, "    %4d  %s\n", n, cause.c_str());
    }
    if (explained < row.failed) {
      std::fprintf(out, "    %4d  wrong output that none of the usual mistakes explains\n",
                   row.failed - explained);
    }
  }
}

} // namespace

int run_verify(const VerifyOptions& o, const BackendFactory& factory, std::FILE* out,
               std::FILE* err) {
  const std::shared_ptr<const PluginLibrary> plugin = open_kernels(o.kernels);
  attn::VerifyOptions vo;
  if (plugin && o.families.empty()) {
    // A plugin is checked on what it implements.
    vo.families.clear();
    for (const auto& f : plugin->families()) {
      vo.families.push_back(f.family);
    }
  }
  if (!o.families.empty()) {
    vo.families.clear();
    for (const auto& f : split_list(o.families)) {
      vo.families.push_back(parse_family(f));
    }
  }
  if (!o.dtypes.empty()) {
    vo.dtypes.clear();
    for (const auto& d : split_list(o.dtypes)) {
      if (fp8_named(d)) {
        throw InputError("--dtypes: '" + d +
                         "' is a KV-cache dtype (queries and outputs are fp32, "
                         "fp16 or bf16): check fp8 caches with --kv-dtypes " +
                         d);
      }
      vo.dtypes.push_back(parse_dtype(d));
    }
  }
  if (!o.kv_dtypes.empty()) {
    vo.plain_cache = false;
    vo.fp8.clear();
    for (const auto& k : split_list(o.kv_dtypes)) {
      if (k == "auto") {
        vo.plain_cache = true;
        continue;
      }
      const std::optional<DType> t = fp8_named(k);
      if (!t) {
        throw InputError("--kv-dtypes: '" + k + "' is not auto, fp8_e4m3 (or fp8) or fp8_e5m2");
      }
      if (std::find(vo.fp8.begin(), vo.fp8.end(), *t) == vo.fp8.end()) {
        vo.fp8.push_back(*t);
      }
    }
  }
  if (vo.families.empty() || vo.dtypes.empty() || (!vo.plain_cache && vo.fp8.empty())) {
    throw InputError("--families, --dtypes and --kv-dtypes need at least one name each");
  }
  if (plugin) {
    for (Family f : vo.families) {
      if (plugin->family(f) == nullptr) {
        throw InputError(std::string("--families ") + family_name(f) + ": plugin " +
                         plugin->identity().name + " does not implement it");
      }
    }
    // An fp8 cache asked for by name that none of the checked families reads: nothing of it
    // could run, so say why instead of checking nothing.
    for (DType kv : o.kv_dtypes.empty() ? std::vector<DType>{} : vo.fp8) {
      if (std::none_of(vo.families.begin(), vo.families.end(),
                       [&](Family f) { return plugin->family(f)->reads_kv(kv); })) {
        const PluginIdentity& id = plugin->identity();
        const std::string where =
            !id.python_module.empty() ? "a family's \"kv_dtypes\" in its declaration"
            : id.abi_version < 4
                ? "plugin ABI 4's kv_dtypes; it was built for ABI " + std::to_string(id.abi_version)
                : "plugin ABI 4's kv_dtypes";
        throw InputError("--kv-dtypes " + std::string(dtype_name(kv)) + ": " +
                         (id.python_module.empty() ? "plugin " : "module ") + id.name +
                         " declares no family that reads " + std::string(dtype_name(kv)) +
                         " KV caches (" + where + ")");
      }
    }
    if (o.device == "all") {
      throw InputError("--device all checks the built-in kernels on every device; with "
                       "--kernels name the device the plugin runs on");
    }
  }
  vo.intensity = parse_intensity(o.intensity);
  vo.seed = o.seed;
  vo.dump_dir = o.dump_dir;
  vo.reference_threads = o.threads;

  // Which devices: "all" is every CUDA device and the CPU; no flag is GPU 0, else the CPU. They
  // are listed and opened in the worker process: the supervisor never touches a device.
  const BackendOptions bo{.threads = o.threads, .kernels = o.kernels};
  const VerifyBackends backends = [&](const WorkerLink& link,
                                      const std::function<void(Backend&)>& each) {
    std::vector<std::string> specs;
    if (o.device == "all") {
      specs = every_device(bo);
      if (specs.size() == 1 && specs.front() == "cpu") {
        // "all" checked one device: say why there was no other.
        const DeviceList l = list_devices(bo);
        link.say("verify: --device all: no GPU (" +
                 (l.why_no_gpu.empty() ? std::string("none found") : l.why_no_gpu) +
                 "); checking the CPU only");
      }
    } else {
      const DeviceChoice choice = choose_device(o.device, plugin.get(), bo);
      if (!choice.said.empty()) {
        link.say("verify: " + choice.said);
      }
      specs.push_back(choice.spec);
    }
    for (const auto& spec : specs) {
      std::unique_ptr<Backend> be = link.start_kernels([&] { return factory(spec, bo); });
      char line[512];
      std::snprintf(line, sizeof line, "verify: %s (%s) with %s, seed %llu, intensity %s",
                    be->info().id.c_str(), be->info().name.c_str(),
                    kernels_phrase(plugin.get()).c_str(), (unsigned long long)o.seed,
                    o.intensity.c_str());
      link.say(line);
      each(*be);
    }
  };

  // A dump a worker was writing when it was killed (a crash of the kernels, a CI timeout) stays
  // as NAME.tmp.XXXXXX, half written: such leftovers are removed before the run, and again once
  // every worker is done, when no dump can be under way (a folder two verify runs share at once
  // is not one this can guard).
  const auto clear_dump_temporaries = [&] {
    std::error_code ec;
    if (!o.dump_dir.empty() && std::filesystem::is_directory(o.dump_dir, ec)) {
      remove_stale_temporaries(o.dump_dir);
    }
  };
  clear_dump_temporaries();
  // Told to stop (a CI job's timeout), verify ends its worker, still writes the JUnit report and
  // the summary of the cases that finished, and then ends by the signal. In process (--in-process)
  // nothing would notice a deferred signal: there it ends the command at once.
  if (!o.in_process) {
    defer_stop_signals();
    // Said by a second stop signal, which ends the command at once: no report yet.
    set_stop_note("told twice, it ended at once, before its summary and report");
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<VerifyReport> reports =
      run_verify_isolated(backends, vo, out, err, o.in_process);
  clear_dump_temporaries();
  int stopped_by = reports.empty() ? 0 : reports.front().stopped_by;
  int passed = 0;
  int failed = 0;
  int skipped = 0;
  int not_run = 0;
  std::string first_device;
  std::string teardown_failure;
  for (const auto& r : reports) {
    if (teardown_failure.empty()) {
      teardown_failure = r.teardown_failure;
    }
    passed += r.passed;
    failed += r.failed;
    skipped += r.skipped;
    not_run += r.not_run;
    if (first_device.empty() && !r.testcases.empty()) {
      first_device = r.testcases.front().device;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (failed > 0) {
    print_failure_causes(out, reports);
    // A Python module is found through the environment, and the CPU kernels' build and fp8 read
    // can be forced by it: the line carries what it was found and forced with.
    std::string env;
    std::vector<const char*> vars = {cpu::kIsaOverrideEnv, cpu::kFp8ReadsEnv};
    if (o.kernels.starts_with("python:")) {
      vars.insert(vars.end(), {"VIRTUAL_ENV", "PYTHONPATH"});
    }
    for (const char* var : vars) {
      if (const char* v = std::getenv(var); v != nullptr && *v != '\0') {
        const std::string value = v;
        const bool plain =
            value.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP"
                                    "QRSTUVWXYZ0123456789_/.:,=+-") == std::string::npos;
        env += std::string(var) + "=" +
               (plain || value.find('\'') != std::string::npos ? value : "'" + value + "'") + " ";
      }
    }
    std::fprintf(
        out,
        "reproduce: %sattn-tune verify%s%s --device %s%s --seed %llu --intensity %s%s%s%s%s%s%s\n",
        env.c_str(), o.kernels.empty() ? "" : " --kernels ", o.kernels.c_str(),
        o.device.empty() ? first_device.c_str() : o.device.c_str(),
        // Threads split the work differently (a race or a split bug may need the same count).
        o.threads > 0 ? (" --threads " + std::to_string(o.threads)).c_str() : "",
        (unsigned long long)o.seed, o.intensity.c_str(), o.families.empty() ? "" : " --families ",
        o.families.c_str(), o.dtypes.empty() ? "" : " --dtypes ", o.dtypes.c_str(),
        o.kv_dtypes.empty() ? "" : " --kv-dtypes ", o.kv_dtypes.c_str());
  }
  std::fprintf(out, "%d passed, %d failed, %d skipped%s\n", passed, failed, skipped,
               not_run > 0 ? (", " + std::to_string(not_run) + " " + kNotRunWhy).c_str() : "");
  std::fflush(out);
  // After the summary: a report that cannot be written (a full disk, exit 4) does not take the
  // gate's outcome with it.
  if (!o.junit.empty()) {
    write_junit(o.junit, reports, secs);
  }
  if (stopped_by == 0) {
    stopped_by = pending_stop_signal(); // told to stop once every case had run
  }
  if (stopped_by != 0) {
    set_stop_note(o.junit.empty() ? "the cases that finished are counted above"
                                  : "the cases that finished are in " + o.junit);
    end_by_stop_signal(stopped_by);
  }
  if (skipped > 0 && skipped >= passed + failed) {
    // A gate that passes having checked a minority of its cases says so where CI logs show it.
    std::fprintf(err,
                 "verify: warning: %d of the %d cases were skipped (the kernels refused them; "
                 "--junit lists why): this gate checked %.0f%% of them\n",
                 skipped, passed + failed + skipped,
                 100.0 * double(passed + failed) / double(passed + failed + skipped));
  }
  if (!teardown_failure.empty()) {
    std::fprintf(err, "verify: the kernels failed after their cases: %s: failing the gate\n",
                 teardown_failure.c_str());
    return kExitMismatch;
  }
  if (passed == 0 && failed == 0) {
    std::fprintf(err, "verify: nothing was checked (every case was skipped): failing the gate\n");
    return kExitMismatch;
  }
  return failed > 0 ? kExitMismatch : kExitOk;
}

Command setup_verify(CLI::App& root) {
  auto o = std::make_shared<VerifyOptions>();
  CLI::App* sub = root.add_subcommand(
      "verify", "Check every kernel family and configuration against the reference (a CI gate)");
  sub->add_option("--device", o->device, "0, cuda:N, cpu or all (default: GPU 0, else the CPU)");
  sub->add_option("--families", o->families, "Comma-separated: decode_v1,decode_v2,prefill")
      ->check(names_given());
  sub->add_option("--dtypes", o->dtypes, "Comma-separated: fp32,fp16,bf16")->check(names_given());
  sub->add_option("--kv-dtypes", o->kv_dtypes,
                  "Comma-separated caches to check: auto (the query's dtype), fp8_e4m3, fp8_e5m2 "
                  "(default: all; fp8 where the kernels read it)")
      ->check(names_given());
  sub->add_option("--junit", o->junit, "Write a JUnit XML report to this file")
      ->check(output_file());
  sub->add_option("--seed", o->seed, "Seed of every case's data (failures print it)")
      ->check(unsigned_64());
  sub->add_option("--intensity", o->intensity, "quick, default or full")
      ->check(CLI::IsMember({"quick", "default", "full"}));
  sub->add_option("--dump-failures", o->dump_dir, "Write failing cases as replay files here");
  sub->add_option("--threads", o->threads, "CPU worker threads (0: all)")
      ->check(CLI::Range(0, 4096));
  sub->add_flag("--in-process", o->in_process,
                "Check in this process, without a supervised worker (for debuggers; a crash ends "
                "the run)");
  add_kernels_option(sub, o->kernels);
  return {sub, [o] { return run_verify(*o, make_backend, stdout, stderr); }};
}

} // namespace attn::cli
