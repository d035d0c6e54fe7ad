// The drawing primitives of the report: XML escaping, number formats, log axes with readable ticks
// and an SVG element builder whose output is well-formed XML (the page is XHTML-compatible).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "src/io/xml_text.h"

namespace attn::report {

// Text and attribute values made safe for XML 1.0 (src/io/xml_text.h).
using ::attn::xml_escape;
// `v` rounded to `sig` significant digits, without exponent or trailing zeros: 0.000123456 ->
// "0.000123", 1234.5 -> "1235" (whole digits are kept), 20.01 -> "20".
[[nodiscard]] std::string format_sig(double v, int sig = 3);
// A duration in the unit that keeps it between 1 and 1000: "21.2 µs", "1.08 ms", "3.10 s".
[[nodiscard]] std::string format_seconds(double s);
// A slowdown as a signed percentage: 0.123 -> "+12.3%", 0 -> "0%".
[[nodiscard]] std::string format_percent(double f);
// A context length or count in k where it is a whole multiple of 1024: 4096 -> "4k", 3000 ->
// "3000".
[[nodiscard]] std::string format_count(long long n);
// A coordinate for an SVG attribute (two decimals, no trailing zeros).
[[nodiscard]] std::string coord(double v);

// A logarithmic axis from data range [lo, hi] to pixels [px_lo, px_hi] (px_hi < px_lo for y).
struct LogAxis {
  double lo = 1.0;
  double hi = 10.0;
  double px_lo = 0.0;
  double px_hi = 100.0;
  [[nodiscard]] double operator()(double v) const;
};
// A linear axis, the same way.
struct LinearAxis {
  double lo = 0.0;
  double hi = 1.0;
  double px_lo = 0.0;
  double px_hi = 100.0;
  [[nodiscard]] double operator()(double v) const;
};

// Ticks of a log10 axis at 1, 2 and 5 times powers of ten within [lo, hi] (1 and 10 only when
// that would give more than `max_ticks`).
[[nodiscard]] std::vector<double> log10_ticks(double lo, double hi, int max_ticks = 8);
// Ticks of a log2 axis at powers of two within [lo, hi], every other one (or fewer) when there
// would be more than `max_ticks`.
[[nodiscard]] std::vector<double> log2_ticks(double lo, double hi, int max_ticks = 9);
// Ticks of a linear axis at a round step (1, 2 or 5 times a power of ten) from lo to past hi;
// the last tick is the axis' new upper end.
[[nodiscard]] std::vector<double> linear_ticks(double lo, double hi, int max_ticks = 6);
// [lo, hi] widened by `factor` on both ends (log scale) so data does not touch the frame.
[[nodiscard]] std::pair<double, double> padded_log_range(double lo, double hi, double factor);

// Builds an <svg> element. Every method escapes its text; `cls` names CSS classes of the page's
// style sheet, which holds the colours so that light, dark and print modes can each set them.
class Svg {
public:
  Svg(double width, double height, std::string cls, std::string label);
  void line(double x1, double y1, double x2, double y2, std::string_view cls);
  void rect(double x, double y, double w, double h, std::string_view cls,
            std::string_view style = {});
  void circle(double cx, double cy, double r, std::string_view cls);
  // A polyline through the points (x0, y0, x1, y1, ...), or a closed polygon.
  void polyline(const std::vector<double>& xy, std::string_view cls);
  void polygon(const std::vector<double>& xy, std::string_view cls);
  // `anchor`: start, middle or end.
  void text(double x, double y, std::string_view s, std::string_view cls,
            std::string_view anchor = "start");
  // A tooltip for the element opened next: a <g> with a <title>, closed by end_group().
  void begin_group(std::string_view title, std::string_view cls = {});
  void end_group();
  [[nodiscard]] std::string str() const; // the whole <svg>...</svg>

private:
  double w_;
  double h_;
  std::string cls_;
  std::string label_;
  std::string body_;
  int open_groups_ = 0;
};

} // namespace attn::report
