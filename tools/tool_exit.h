// How the speed tools in tools/ end: src/cli/exit_codes.h for flags and errors, and exit 1 once
// everything is out when a configuration failed validation.
#pragma once
#include <cstdio>

#include "src/cli/exit_codes.h"
#include "src/model/errors.h"

namespace attn::tools {

// The exit codes of the speed tools, as their --help prints them.
inline constexpr const char* kSpeedToolExitCodes =
    "Exit codes: 0 every configuration passed validation and was measured; 1 a configuration "
    "failed validation (everything else is still measured, printed and written); 2 bad flags; "
    "3 the device is missing or unusable (no GPU: one line on stderr); 4 an internal or CUDA "
    "error.";

// The exit code once everything is printed and written: kExitMismatch when any configuration
// failed validation, said again in the last line of stdout so that it is not lost in the table.
[[nodiscard]] inline int validation_exit_code(int failed) {
  if (failed == 0) {
    return kExitOk;
  }
  std::printf("\nvalidation: %d configuration%s FAILED (listed above); exit code %d\n", failed,
              failed == 1 ? "" : "s", kExitMismatch);
  return kExitMismatch;
}

} // namespace attn::tools
