// attn-tune: wires the subcommands together and turns errors into exit codes (README.md).
#include <string>
#include <vector>

#include "build_info.h"
#include "src/cli/commands.h"
#include "src/cli/exit_codes.h"
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
  commands.push_back(cli::setup_search_check(app));
  if (const auto done =
          cli::parse_or_exit(app, argc, argv, "attn-tune", [&](const CLI::ParseError& e) {
            return parse_error_message(app, e);
          })) {
    return *done;
  }
  for (auto& c : commands) {
    if (c.app->parsed()) {
      return cli::run_reporting_errors("attn-tune", c.run);
    }
  }
  return kExitUsage;
}
