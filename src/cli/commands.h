// The subcommands of attn-tune. Each lives in src/cli/<cmd>_command.cpp as a <Cmd>Options struct,
// a setup_<cmd> function that binds its flags and a run_<cmd> function that does the work;
// main() only wires them.
#pragma once
#include <functional>

#include <CLI/CLI.hpp>

namespace attn::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run; // returns the exit code; throws InputError / DeviceUnavailable
};

Command setup_devices(CLI::App& root);
Command setup_merge(CLI::App& root);
Command setup_plugin(CLI::App& root);
Command setup_replay(CLI::App& root);
Command setup_search_check(CLI::App& root);
Command setup_report(CLI::App& root);
Command setup_sweep(CLI::App& root);
Command setup_table(CLI::App& root);
Command setup_verify(CLI::App& root);

} // namespace attn::cli
