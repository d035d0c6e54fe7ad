// What a command does when it is told to stop: SIGINT (Ctrl-C), SIGTERM (a job runner's timeout,
// `kill`) or SIGHUP (its terminal closed). The temporary files it was writing are removed, one
// line on standard error names the signal and what the command keeps, and then the signal's
// default action ends the process, so that its exit status names the signal (130, 143, 129) as
// shells and CI runners expect. The worker it supervises dies with it (child_process.h).
// What the handler does is async-signal-safe: it reads fixed buffers that are filled before
// they are published, removes files and writes one line.
#pragma once
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

// A temporary file being written: a stop signal that arrives while this object lives removes it.
// At most 16 at a time are looked after; more are left to the next run's clean-up.
class RemovedOnStop {
public:
  explicit RemovedOnStop(const std::string& path);
  ~RemovedOnStop();
  RemovedOnStop(const RemovedOnStop&) = delete;
  RemovedOnStop& operator=(const RemovedOnStop&) = delete;

private:
  int slot_ = -1;
};

} // namespace attn
