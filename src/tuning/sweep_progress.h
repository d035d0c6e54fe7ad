// The sweep's progress line: done/total, percent, an ETA from this run's pace, and the last
// outcome; rewritten in place on a terminal, one line per measurement otherwise.
#pragma once
#include <chrono>
#include <cstdio>
#include <string>

namespace attn {

class SweepProgress {
public:
  // `out` nullptr: silent. `done` counts measurements an earlier run already made.
  // `open_ended` (an adaptive search, which stops when its decisions settle): `total` is only the
  // exhaustive plan's size, so the line counts timings and elapsed time, with no percent or ETA
  // that would assume the whole plan.
  SweepProgress(std::FILE* out, bool tty, int total, int done, bool open_ended = false);
  // One measurement finished with `status` ("ok 12.3 us", "skipped (...)") on `what`.
  void step(const std::string& status, const std::string& what);
  // A line of its own ("waiting for the device", "worker restarted"), above the progress line.
  void note(const std::string& text);
  // Ends the in-place line on a terminal.
  void finish();

private:
  std::FILE* out_;
  bool tty_;
  int total_;
  int finished_;
  int new_done_ = 0;
  bool open_ended_;
  bool open_line_ = false; // a terminal line is being rewritten in place
  std::chrono::steady_clock::time_point t0_;
};

// "42s", "3m07s", "2h05m".
[[nodiscard]] std::string fmt_duration(double s);

} // namespace attn
