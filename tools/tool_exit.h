// How the programs in tools/ end: the exit codes of src/model/errors.h, and one line on stderr for
// anything that is not a result (a bad flag, no device, an error).
#pragma once
#include <cstdio>
#include <exception>
#include <functional>
#include <optional>

#include <CLI/CLI.hpp>

#include "src/model/errors.h"

namespace attn::tools {

// The exit codes of the speed tools, as their --help prints them.
inline constexpr const char* kSpeedToolExitCodes =
    "Exit codes: 0 every configuration passed validation and was measured; 1 a configuration "
    "failed validation (everything else is still measured, printed and written); 2 bad flags; "
    "3 the device is missing or unusable (no GPU: one line on stderr); 4 an internal or CUDA "
    "error.";

// Parses the command line. --help prints the help and ends with 0; a bad flag is one line on
// stderr and kExitUsage. nullopt: carry on.
[[nodiscard]] inline std::optional<int> parse_flags(CLI::App& app, int argc, char** argv,
                                                    const char* name) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: error: %s (see %s --help)\n", name, e.what(), name);
    return kExitUsage;
  }
  return std::nullopt;
}

// Runs the tool's work and turns what it throws into an exit code and one line on stderr.
[[nodiscard]] inline int run_reporting_errors(const char* name, const std::function<int()>& work) {
  try {
    return work();
  } catch (const DeviceUnavailable& e) {
    std::fprintf(stderr, "%s: device unavailable: %s\n", name, e.what());
    return kExitNoDevice;
  } catch (const InputError& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", name, e.what());
    return kExitInternal;
  }
}

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
