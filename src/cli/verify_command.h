// `attn-tune verify`'s options and body, exposed so that tests can run the command with a
// planted backend factory (the CLI always passes make_backend).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

#include "src/backends/registry.h"

namespace attn::cli {

struct VerifyOptions {
  std::string device; // empty: GPU 0 if there is one, else the CPU
  std::string families;
  std::string dtypes;
  std::string kv_dtypes; // comma-separated: auto, fp8_e4m3 (fp8), fp8_e5m2
  std::string junit;
  std::string dump_dir;
  std::string intensity = "default";
  uint64_t seed = 1;
  int threads = 0;
  bool in_process = false; // no supervised worker: a crash ends the run (for debuggers)
  std::string kernels;     // a kernel plugin library; empty: the built-in kernels
};

// Runs the gate on every device named; returns the exit code. Output lines go to `out`, the
// one-line notes about devices to `err`.
[[nodiscard]] int run_verify(const VerifyOptions& o, const BackendFactory& factory, std::FILE* out,
                             std::FILE* err);

} // namespace attn::cli
