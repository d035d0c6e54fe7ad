// attn-tune: wires the subcommands together and turns errors into exit codes (README.md).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "build_info.h"
#include "src/cli/commands.h"
#include "src/model/errors.h"

namespace {
// CLI11 checks require_subcommand before it complains about leftover arguments, so a mistyped
// subcommand or a root-level flag it does not know would only say "A subcommand is required".
// Name the first argument it could not place instead, with the subcommands it would accept.
std::string parse_error_message(const CLI::App& app, const CLI::ParseError& e) {
  const std::vector<std::string> left = app.remaining();
  if (!app.get_subcommands().empty() || left.empty()) {
    return e.what();
  }
  const std::string& arg = left.front();
  if (arg.rfind('-', 0) == 0) {
    return "unknown option '" + arg + "'";
  }
  std::string names;
  for (const CLI::App* sub : app.get_subcommands({})) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return "unknown subcommand '" + arg + "' (expected one of: " + names + ")";
}
} // namespace

int main(int argc, char** argv) {
  using namespace attn;
  CLI::App app{"attn-tune: tune and validate paged attention kernels for LLM inference engines"};
  app.set_version_flag("--version",
                       std::string("attn-tune ") + ATTN_VERSION + " (" + ATTN_GIT_HASH + ")");
  app.require_subcommand(1);
  std::vector<cli::Command> commands = {cli::setup_sweep(app),   cli::setup_verify(app),
                                        cli::setup_replay(app),  cli::setup_table(app),
                                        cli::setup_devices(app), cli::setup_plugin(app)};
  commands.push_back(cli::setup_merge(app));
  commands.push_back(cli::setup_report(app));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "attn-tune: error: %s (see attn-tune --help)\n",
                 parse_error_message(app, e).c_str());
    return kExitUsage;
  }
  for (auto& c : commands) {
    if (c.app->parsed()) {
      try {
        return c.run();
      } catch (const InputError& e) {
        std::fprintf(stderr, "attn-tune: error: %s\n", e.what());
        return kExitUsage;
      } catch (const DeviceUnavailable& e) {
        std::fprintf(stderr, "attn-tune: device unavailable: %s\n", e.what());
        return kExitNoDevice;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "attn-tune: internal error: %s\n", e.what());
        return kExitInternal;
      }
    }
  }
  return kExitUsage;
}
