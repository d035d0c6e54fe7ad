// attn-tune: wires the subcommands together and turns errors into exit codes (README.md).
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "build_info.h"
#include "src/backends/deadline.h"
#include "src/cli/commands.h"
#include "src/cli/exit_codes.h"
#include "src/io/stop_signals.h"
#include "src/model/errors.h"

namespace {
// CLI11 checks require_subcommand before it complains about leftover arguments, so a mistyped
// subcommand or a root-level flag it does not know would only say "A subcommand is required".
// Name the first argument it could not place instead, with the subcommands it would accept.
// The same at every level: `table showw FILE` names 'showw' and the subcommands of `table`.
std::string parse_error_message(const CLI::App& app, const CLI::ParseError& e) {
  const CLI::App* at = &app;
  std::string path = "";
  while (!at->get_subcommands().empty()) {
    at = at->get_subcommands().front();
    path += std::string(path.empty() ? "" : " ") + at->get_name();
  }
  std::vector<std::string> left = at->remaining();
  if (left.empty()) {
    left = app.remaining();
  }
  if (at->get_subcommands({}).empty()) {
    return e.what();
  }
  std::string names;
  for (const CLI::App* sub : at->get_subcommands({})) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  if (left.empty()) {
    return (path.empty() ? std::string("a subcommand") : "'" + path + "' needs a subcommand") +
           (path.empty() ? " is required: " : ": ") + names;
  }
  const std::string& arg = left.front();
  const std::string where = path.empty() ? "" : " of '" + path + "'";
  if (arg.rfind('-', 0) == 0) {
    return "unknown option '" + arg + "'" + where;
  }
  return "unknown subcommand '" + arg + "'" + where + " (expected one of: " + names + ")";
}
// Whether standard output is a pipe whose reading end is closed.
bool stdout_reader_gone() {
  struct stat st {};
  if (::fstat(STDOUT_FILENO, &st) != 0 || !S_ISFIFO(st.st_mode)) {
    return false;
  }
  pollfd p{STDOUT_FILENO, POLLOUT, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLERR) != 0;
}
} // namespace

int main(int argc, char** argv) {
  using namespace attn;
  // A write to a pipe nobody reads (`sweep 2>&1 | head -1`) or past a file size limit (ulimit -f)
  // is an error the write returns, not a signal that ends a sweep between two measurements with
  // no word and no table: progress lines are then lost, results and tables take their error
  // paths (a line cut back, exit 4 naming the file).
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGXFSZ, SIG_IGN);
  // Told to stop (Ctrl-C, a job's timeout), a command says so in one line, with what it keeps,
  // and leaves no temporary file of a table or report half-written.
  install_stop_handlers();
  // Started with stdin, stdout or stderr closed, the next file opened (a lock, results.jsonl, a
  // pipe to a worker) would take that number and receive what is printed: keep 0-2 taken.
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      const int null_fd = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (null_fd >= 0 && null_fd != fd) {
        ::dup2(null_fd, fd);
        ::close(null_fd);
      }
    }
  }
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
      const int rc = cli::run_reporting_errors("attn-tune", [&] {
        // Read here, not first in a worker: a bad value is the command's usage error.
        (void)unit_grace_s(DeviceInfo{});
        return c.run();
      });
      // What was printed must have arrived (a full disk, /dev/full): a lost report is no success.
      // A reader that left the pipe early (`| head -1`) chose to drop the rest: the work is done
      // and saved, so that is not a failure.
      if ((std::fflush(stdout) != 0 || std::ferror(stdout)) && rc == kExitOk &&
          !stdout_reader_gone()) {
        std::fprintf(stderr, "attn-tune: error: cannot write the standard output: %s\n",
                     std::strerror(errno));
        return kExitInternal;
      }
      return rc;
    }
  }
  return kExitUsage;
}
