// The subcommands of attn-tune. Each lives in its own cmd_*.cpp as an options struct, a setup_
// function that binds its flags and a run_ function that does the work; main() only wires them.
#pragma once
#include <functional>

#include <CLI/CLI.hpp>

namespace attn {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run; // returns the exit code; throws InputError / DeviceUnavailable
};

Command setup_devices(CLI::App& root);
Command setup_replay(CLI::App& root);
Command setup_sweep(CLI::App& root);
Command setup_table(CLI::App& root);
Command setup_verify(CLI::App& root);

} // namespace attn
