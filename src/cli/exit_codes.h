// How a program of this project turns its command line and its work into an exit code
// (src/model/errors.h): help and version end with 0, anything that is not a result is one line
// on stderr. attn-tune's main and the tools/ programs share it.
#pragma once
#include <cstdio>
#include <exception>
#include <functional>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "src/model/errors.h"

namespace attn::cli {

// Parses the command line. --help and --version print and end with 0; a bad flag is one line on
// stderr, worded by `message` (CLI11's own words when it is empty), and kExitUsage. nullopt:
// the flags parsed, carry on.
[[nodiscard]] inline std::optional<int>
parse_or_exit(CLI::App& app, int argc, char** argv, const char* name,
              const std::function<std::string(const CLI::ParseError&)>& message = {}) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string what = message ? message(e) : std::string(e.what());
    std::fprintf(stderr, "%s: error: %s (see %s --help)\n", name, what.c_str(), name);
    return kExitUsage;
  }
  return std::nullopt;
}

// Runs the work and turns what it throws into an exit code and one line on stderr.
[[nodiscard]] inline int run_reporting_errors(const char* name, const std::function<int()>& work) {
  try {
    return work();
  } catch (const InputError& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return kExitUsage;
  } catch (const KernelFault& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return kExitMismatch;
  } catch (const DeviceUnavailable& e) {
    std::fprintf(stderr, "%s: device unavailable: %s\n", name, e.what());
    return kExitNoDevice;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", name, e.what());
    return kExitInternal;
  }
}

} // namespace attn::cli
