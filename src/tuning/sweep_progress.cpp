#include "src/tuning/sweep_progress.h"

namespace attn {

std::string fmt_duration(double s) {
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, (int(s) % 3600) / 60);
  }
  return buf;
}

SweepProgress::SweepProgress(std::FILE* out, bool tty, int total, int done, bool open_ended)
    : out_(out), tty_(tty), total_(total), finished_(done), open_ended_(open_ended),
      t0_(std::chrono::steady_clock::now()) {}

void SweepProgress::step(const std::string& status, const std::string& what) {
  ++finished_;
  ++new_done_;
  if (!out_) {
    return;
  }
  const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  char head[96];
  if (open_ended_) {
    std::snprintf(head, sizeof head, "[%d timing%s, %s elapsed]", finished_,
                  finished_ == 1 ? "" : "s", fmt_duration(el).c_str());
  } else {
    const int left = total_ - finished_;
    const double rest = el / new_done_ * left;
    // "ETA 0s" would read as a stall on a sweep of short runs: under a second left is "<1s", and
    // nothing left is "done".
    const std::string eta = left <= 0    ? "done"
                            : rest < 0.5 ? "ETA <1s"
                                         : "ETA " + fmt_duration(rest);
    const int pct = total_ ? int(100.0 * finished_ / total_) : 100;
    if (tty_) {
      std::snprintf(head, sizeof head, "[%d/%d %d%%] %s", finished_, total_, pct, eta.c_str());
    } else {
      std::snprintf(head, sizeof head, "[%d/%d %d%% %s]", finished_, total_, pct, eta.c_str());
    }
  }
  if (tty_) {
    std::string line = head + std::string("  ") + what;
    if (line.size() > 150) {
      line = line.substr(0, 147) + "...";
    }
    std::fprintf(out_, "\r\033[K%s", line.c_str());
    open_line_ = true;
  } else {
    std::fprintf(out_, "%s %s %s\n", head, status.c_str(), what.c_str());
  }
  std::fflush(out_);
}

void SweepProgress::note(const std::string& text) {
  if (!out_) {
    return;
  }
  std::fprintf(out_, "%s%s\n", open_line_ ? "\r\033[K" : "", text.c_str());
  open_line_ = false;
  std::fflush(out_);
}

void SweepProgress::finish() {
  if (out_ && tty_ && open_line_) {
    std::fprintf(out_, "\n");
    open_line_ = false;
  }
}

} // namespace attn
