// attn-tune: wires the subcommands together and turns errors into exit codes (README.md).
#include <cstdio>
#include <exception>
#include <vector>

#include "build_info.h"
#include "src/commands.h"
#include "src/errors.h"

int main(int argc, char** argv) {
  using namespace attn;
  CLI::App app{"attn-tune: tune and validate paged attention kernels for LLM inference engines"};
  app.set_version_flag("--version", std::string("attn-tune ") + ATTN_VERSION + " (" +
                                        ATTN_GIT_HASH + ")");
  app.require_subcommand(1);
  std::vector<Command> commands = {setup_devices(app), setup_sweep(app), setup_table(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "attn-tune: error: %s (see attn-tune --help)\n", e.what());
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
