// What a command does when it is told to stop: SIGINT (Ctrl-C), SIGTERM (a job runner's timeout,
// `kill`) or SIGHUP (its terminal closed). The temporary files it was writing are removed, one
// line on standard error names the signal and what the command keeps, and then the signal's
// default action ends the process, so that its exit status names the signal (130, 143, 129) as
// shells and CI runners expect. The worker it supervises dies with it (child_process.h).
// What the handler does is async-signal-safe: it reads fixed buffers that are filled before
// they are published, removes files and writes one line.
#pragma once
#include <csignal>
#include <stdexcept>
#include <string>

namespace attn {

// Installs the handlers for this process (main calls it once).
void install_stop_handlers();
// In a forked child (a worker, a probe): the default actions back, so a signal ends the child as
// before and only the command's own process says anything.
void restore_default_stop_actions();

// What the stop line says after "attn-tune: stopped by SIGTERM", "; " first: what the command
// keeps and how to go on ("the measurements made so far are in OUT/results.jsonl: `attn-tune
// sweep --resume --out OUT` carries on"). Empty: nothing. Longer than 1000 bytes: cut there.
void set_stop_note(const std::string& note);

// For a command that reports what it finished before it stops (verify's JUnit report): from now
// on the first stop signal is only recorded (pending_stop_signal), for the command to notice
// within a second (the supervisor's wait, src/validation/supervisor.h, throws StopRequested), write
// what it has and end_by_stop_signal; a second signal stops it at once, as without this.
void defer_stop_signals();
// The stop signal recorded since defer_stop_signals (0: none).
[[nodiscard]] int pending_stop_signal();
// What the handler does, from ordinary code: temporaries removed, the stop line, the signal's
// default action.
[[noreturn]] void end_by_stop_signal(int sig);

// Thrown where a deferred stop signal is noticed.
struct StopRequested : std::runtime_error {
  explicit StopRequested(int s, std::string in_flight = {});
  int sig;
  std::string unit; // the work in flight when the stop came (a verify case), or empty
};

// Holds the stop signals back in this thread while it lives; one that came meanwhile is handled
// as it ends. For a file made and registered as one step (RemovedOnStop): a signal is delivered
// as a system call returns, so one that arrived while the file was being created would otherwise
// find it made and not yet registered, and leave it behind (3 of 107 stops in an outside audit).
class StopSignalsHeld {
public:
  StopSignalsHeld();
  ~StopSignalsHeld();
  StopSignalsHeld(const StopSignalsHeld&) = delete;
  StopSignalsHeld& operator=(const StopSignalsHeld&) = delete;

private:
  sigset_t before_{};
};

// A temporary file being written: a stop signal that arrives while this object lives removes it.
// A folder (Kind::folder) is removed after every file, so it goes where the files registered
// in it were all it held. At most 16 at a time are looked after; more are left to the next run's
// clean-up.
class RemovedOnStop {
public:
  enum class Kind { file, folder };
  explicit RemovedOnStop(const std::string& path, Kind kind = Kind::file);
  ~RemovedOnStop();
  RemovedOnStop(const RemovedOnStop&) = delete;
  RemovedOnStop& operator=(const RemovedOnStop&) = delete;

private:
  int slot_ = -1;
};

} // namespace attn
