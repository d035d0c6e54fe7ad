#include "src/io/stop_signals.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <unistd.h>
#include <utility>

namespace attn {

namespace {

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

// One temporary file (or folder) looked after: free (0), being filled or emptied (1), ready (2).
struct Slot {
  std::atomic<int> state{0};
  bool folder = false; // removed with rmdir, after every file (it must be empty by then)
  char path[4096] = {};
};
Slot g_slots[16];

// The stop line's note, double-buffered: a new note is written into the buffer not in use, then
// published, so the handler never reads a buffer being written.
char g_notes[2][1001] = {};
std::atomic<int> g_note{-1};

std::atomic<pid_t> g_owner{0}; // the process whose handlers these are (not a fork of it)

void put(const char* s, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) {
      return; // nothing to be done about a lost line now
    }
    s += w;
    n -= std::size_t(w);
  }
}

void put(const char* s) { put(s, std::strlen(s)); }

const char* name_of(int sig) {
  switch (sig) {
  case SIGINT:
    return "SIGINT";
  case SIGTERM:
    return "SIGTERM";
  case SIGHUP:
    return "SIGHUP";
  default:
    return "a signal";
  }
}

std::atomic<bool> g_deferred{false};
std::atomic<int> g_pending{0};
std::atomic<int64_t> g_pending_at{0}; // CLOCK_MONOTONIC nanoseconds of the pending signal

// The same signal again this soon after the first is the same stop, not a second one: coreutils'
// `timeout` sends its signal to the command and then to its whole process group, and CI runners
// signal a job's processes and its group, microseconds apart.
constexpr int64_t kSameStopNanos = 100'000'000;

int64_t now_nanos() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts); // async-signal-safe
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

extern "C" void on_stop(int sig) {
  const int saved = errno;
  if (g_deferred.load() && ::getpid() == g_owner.load()) {
    int none = 0;
    if (g_pending.compare_exchange_strong(none, sig)) {
      g_pending_at.store(now_nanos());
      errno = saved;
      return; // the command notices it, reports what it finished, and ends by it
    }
    if (none == sig && now_nanos() - g_pending_at.load() < kSameStopNanos) {
      errno = saved;
      return; // the same stop, delivered twice
    }
  }
  if (::getpid() == g_owner.load()) {
    for (const bool folders : {false, true}) {
      for (Slot& s : g_slots) {
        if (s.state.load() == 2 && s.folder == folders) {
          (void)(folders ? ::rmdir(s.path) : ::unlink(s.path));
        }
      }
    }
    put("attn-tune: stopped by ");
    put(name_of(sig));
    const int note = g_note.load();
    if (note >= 0 && g_notes[note][0] != '\0') {
      put("; ");
      put(g_notes[note]);
    }
    put("\n");
  }
  errno = saved;
  // The default action, once this handler returns and the signal is no longer blocked: the
  // process ends by the signal.
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

} // namespace

StopRequested::StopRequested(int s, std::string in_flight)
    : std::runtime_error(std::string("stopped by ") + name_of(s)), sig(s),
      unit(std::move(in_flight)) {}

void defer_stop_signals() { g_deferred.store(true); }

int pending_stop_signal() { return g_pending.load(); }

void end_by_stop_signal(int sig) {
  std::fflush(nullptr);
  g_deferred.store(false);
  g_pending.store(0);
  on_stop(sig); // as the handler would have: its line, the temporaries, the default action
  std::raise(sig);
  std::_Exit(128 + sig); // not reached: the signal's default action ends the process
}

void install_stop_handlers() {
  g_owner.store(::getpid());
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  for (const int sig : kStopSignals) {
    sigaddset(&sa.sa_mask, sig); // one stop at a time: a second signal waits for the first
  }
  for (const int sig : kStopSignals) {
    struct sigaction old {};
    // A signal ignored when the command started (nohup's SIGHUP) stays ignored.
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) {
      continue;
    }
    ::sigaction(sig, &sa, nullptr);
  }
}

void restore_default_stop_actions() {
  for (const int sig : kStopSignals) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == on_stop) {
      std::signal(sig, SIG_DFL);
    }
  }
}

void set_stop_note(const std::string& note) {
  const int next = g_note.load() == 0 ? 1 : 0;
  const std::size_t n = std::min(note.size(), sizeof g_notes[next] - 1);
  std::memcpy(g_notes[next], note.data(), n);
  g_notes[next][n] = '\0';
  g_note.store(next);
}

StopSignalsHeld::StopSignalsHeld() {
  sigset_t stop;
  sigemptyset(&stop);
  for (const int sig : kStopSignals) {
    sigaddset(&stop, sig);
  }
  ::pthread_sigmask(SIG_BLOCK, &stop, &before_);
}

StopSignalsHeld::~StopSignalsHeld() { ::pthread_sigmask(SIG_SETMASK, &before_, nullptr); }

RemovedOnStop::RemovedOnStop(const std::string& path, Kind kind) {
  if (path.size() >= sizeof Slot::path) {
    return;
  }
  for (int i = 0; i < int(std::size(g_slots)); ++i) {
    int free = 0;
    if (g_slots[i].state.compare_exchange_strong(free, 1)) {
      std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
      g_slots[i].folder = kind == Kind::folder;
      g_slots[i].state.store(2);
      slot_ = i;
      return;
    }
  }
}

RemovedOnStop::~RemovedOnStop() {
  if (slot_ >= 0) {
    g_slots[slot_].state.store(0);
  }
}

} // namespace attn
