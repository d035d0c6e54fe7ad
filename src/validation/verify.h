// `attn-tune verify`: the correctness gate. Runs every kernel family and configuration of a
// kernel set on the SPEC.md edge cases (verify_cases.h), each a checked run, and reports per
// case, per JUnit testcase (family x configuration x group) and in sum.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "src/backends/backend.h"
#include "src/validation/verify_cases.h"
#include "src/validation/worker_protocol.h"

namespace attn {

struct VerifyOptions {
  std::vector<Family> families = {Family::decode_v1, Family::decode_v2, Family::prefill};
  std::vector<DType> dtypes = {DType::f32, DType::f16, DType::bf16};
  // The caches checked: "auto" (the query's dtype) when plain_cache, and the fp8 formats listed
  // (their groups run only where the kernel set reads fp8 caches).
  bool plain_cache = true;
  std::vector<DType> fp8 = {DType::fp8_e4m3, DType::fp8_e5m2};
  Intensity intensity = Intensity::standard;
  uint64_t seed = 1;
  std::string dump_dir; // write failing cases as replay files here (empty: don't)
  int reference_threads = 0;
};

// One JUnit testcase: a family x configuration x case group on one device.
struct VerifyTestcase {
  std::string device;
  std::string family;
  std::string config;
  std::string group;
  int passed = 0;
  int failed = 0;
  int skipped = 0;
  int faults = 0; // of the failed: a crash, hang or error rather than a wrong result
  int not_run = 0; // cases left out because the configuration hung on earlier ones
  double seconds = 0.0;
  std::vector<std::string> failures; // one line per failing case
  // What the failing cases look like (diagnose_failure) and in how many cases each.
  std::map<std::string, int> causes;
  std::string skip_reason; // the last skipped case's (every case's, when all were skipped)
  // The error testcase of a verify stopped by a signal: no kernel's failure, and counted in no
  // total (the summary's stop line says it).
  bool interruption = false;
};

// How the totals and JUnit name the cases of a configuration that verify gave up on after it
// hung (each hang costs the case's whole deadline): "N not run (...)".
inline constexpr const char* kNotRunWhy = "not run (their configuration hung on earlier cases)";

struct VerifyReport {
  std::vector<VerifyTestcase> testcases;
  int passed = 0;
  int failed = 0;
  int skipped = 0;
  int not_run = 0;                 // cases of configurations given up on after their hangs
  std::vector<std::string> dumped; // replay files written
  // What the kernels' teardown did after the work (a plugin's destroy that crashed or hung its
  // worker); empty when it ended normally. A gate with one fails.
  std::string teardown_failure;
  // The stop signal (SIGINT, SIGTERM, SIGHUP) that ended the run before every case ran, under
  // defer_stop_signals (src/io/stop_signals.h); 0 when it ran whole. The report then holds the
  // cases that finished and a testcase "interrupted" that is an error.
  int stopped_by = 0;
};

// Runs the gate on one backend in this process. Failing cases are printed to `log` as they
// happen (one line each); nothing else is printed.
[[nodiscard]] VerifyReport run_verify(Backend& be, const VerifyOptions& opt, std::FILE* log);

// Opens each backend to check, inside a worker process, and hands it to `each`; what it says
// through `link` is printed to `info` (each line once, however many workers say it).
using VerifyBackends =
    std::function<void(const WorkerLink& link, const std::function<void(Backend&)>& each)>;

// Runs the gate in supervised worker processes (unless `in_process`): a configuration that
// crashes or hangs its worker is a failed case whose line gives the reason (a signal, a CUDA
// error, a timeout), and a fresh worker carries on after it. One report per device, in order.
[[nodiscard]] std::vector<VerifyReport> run_verify_isolated(const VerifyBackends& backends,
                                                            const VerifyOptions& opt,
                                                            std::FILE* log, std::FILE* info,
                                                            bool in_process);

} // namespace attn
