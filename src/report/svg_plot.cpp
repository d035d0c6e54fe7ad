// SVG building and axis arithmetic for the report's figures.
#include "src/report/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <stdexcept>

namespace attn::report {

std::string format_sig(double v, int sig) {
  if (!std::isfinite(v)) {
    return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  }
  if (v == 0.0) {
    return "0";
  }
  const int mag = int(std::floor(std::log10(std::fabs(v))));
  const int decimals = std::max(0, sig - 1 - mag);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) { // "20.0" -> "20", "1.50" -> "1.5"
    while (s.back() == '0') {
      s.pop_back();
    }
    if (s.back() == '.') {
      s.pop_back();
    }
  }
  return s;
}

std::string format_seconds(double s) {
  if (!std::isfinite(s)) {
    return "-";
  }
  if (s >= 1.0) {
    return format_sig(s) + " s";
  }
  if (s >= 1e-3) {
    return format_sig(s * 1e3) + " ms";
  }
  if (s >= 1e-6) {
    return format_sig(s * 1e6) + " \u00b5s";
  }
  return format_sig(s * 1e9) + " ns";
}

std::string format_percent(double f) {
  if (!std::isfinite(f)) {
    return "-";
  }
  if (std::fabs(f) < 5e-5) {
    return "0%";
  }
  char buf[32];
  const double pct = f * 100.0;
  std::snprintf(buf, sizeof buf, std::fabs(pct) >= 100 ? "%+.0f%%" : "%+.1f%%", pct);
  return buf;
}

std::string format_count(long long n) {
  if (n >= 1024 && n % 1024 == 0) {
    return std::to_string(n / 1024) + "k";
  }
  return std::to_string(n);
}

std::string coord(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string s = buf;
  while (s.back() == '0') {
    s.pop_back();
  }
  if (s.back() == '.') {
    s.pop_back();
  }
  return s == "-0" ? "0" : s;
}

double LogAxis::operator()(double v) const {
  const double t = (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo));
  return px_lo + t * (px_hi - px_lo);
}

double LinearAxis::operator()(double v) const {
  return px_lo + (v - lo) / (hi - lo) * (px_hi - px_lo);
}

std::vector<double> log10_ticks(double lo, double hi, int max_ticks) {
  std::vector<double> all;
  std::vector<double> decades;
  for (int e = int(std::floor(std::log10(lo))); e <= int(std::ceil(std::log10(hi))); ++e) {
    const double base = std::pow(10.0, e);
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * base;
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) {
        all.push_back(v);
        if (m == 1.0) {
          decades.push_back(v);
        }
      }
    }
  }
  if (int(all.size()) <= max_ticks) {
    return all;
  }
  return decades;
}

std::vector<double> log2_ticks(double lo, double hi, int max_ticks) {
  std::vector<double> all;
  for (int e = int(std::ceil(std::log2(lo) - 1e-9)); e <= int(std::floor(std::log2(hi) + 1e-9));
       ++e) {
    all.push_back(std::ldexp(1.0, e));
  }
  int step = 1;
  while (int(all.size() + step - 1) / step > max_ticks) {
    ++step;
  }
  std::vector<double> out;
  for (std::size_t i = 0; i < all.size(); i += std::size_t(step)) {
    out.push_back(all[i]);
  }
  return out;
}

std::vector<double> linear_ticks(double lo, double hi, int max_ticks) {
  if (!(hi > lo)) {
    hi = lo + 1.0;
  }
  const double raw = (hi - lo) / std::max(1, max_ticks - 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  std::vector<double> out;
  for (double v = lo; v < hi + step * 0.999; v += step) {
    out.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  }
  return out;
}

std::pair<double, double> padded_log_range(double lo, double hi, double factor) {
  if (!(lo > 0) || !(hi > 0)) {
    return {1.0, 10.0};
  }
  if (hi <= lo) {
    hi = lo * 2;
  }
  return {lo / factor, hi * factor};
}

Svg::Svg(double width, double height, std::string cls, std::string label)
    : w_(width), h_(height), cls_(std::move(cls)), label_(std::move(label)) {}

namespace {
// Appends the parts in order (one growth, and no temporaries for GCC 12's -Wstringop-overflow to
// misread).
void add(std::string& out, std::initializer_list<std::string_view> parts) {
  for (std::string_view p : parts) {
    out.append(p);
  }
}

std::string points_attr(const std::vector<double>& xy) {
  if (xy.size() % 2 != 0) {
    throw std::logic_error("Svg: odd number of coordinates");
  }
  std::string s;
  for (std::size_t i = 0; i < xy.size(); i += 2) {
    add(s, {i ? " " : "", coord(xy[i]), ",", coord(xy[i + 1])});
  }
  return s;
}
} // namespace

void Svg::line(double x1, double y1, double x2, double y2, std::string_view cls) {
  add(body_, {"<line x1=\"", coord(x1), "\" y1=\"", coord(y1), "\" x2=\"", coord(x2), "\" y2=\"",
              coord(y2), "\" class=\"", xml_escape(cls), "\"/>"});
}

void Svg::rect(double x, double y, double w, double h, std::string_view cls,
               std::string_view style) {
  add(body_, {"<rect x=\"", coord(x), "\" y=\"", coord(y), "\" width=\"", coord(w), "\" height=\"",
              coord(h), "\" class=\"", xml_escape(cls), "\""});
  if (!style.empty()) {
    add(body_, {" style=\"", xml_escape(style), "\""});
  }
  body_.append("/>");
}

void Svg::circle(double cx, double cy, double r, std::string_view cls) {
  add(body_, {"<circle cx=\"", coord(cx), "\" cy=\"", coord(cy), "\" r=\"", coord(r), "\" class=\"",
              xml_escape(cls), "\"/>"});
}

void Svg::polyline(const std::vector<double>& xy, std::string_view cls) {
  add(body_, {"<polyline points=\"", points_attr(xy), "\" class=\"", xml_escape(cls), "\"/>"});
}

void Svg::polygon(const std::vector<double>& xy, std::string_view cls) {
  add(body_, {"<polygon points=\"", points_attr(xy), "\" class=\"", xml_escape(cls), "\"/>"});
}

void Svg::text(double x, double y, std::string_view s, std::string_view cls,
               std::string_view anchor) {
  add(body_, {"<text x=\"", coord(x), "\" y=\"", coord(y), "\" class=\"", xml_escape(cls), "\""});
  if (anchor != "start") {
    add(body_, {" text-anchor=\"", xml_escape(anchor), "\""});
  }
  add(body_, {">", xml_escape(s), "</text>"});
}

void Svg::begin_group(std::string_view title, std::string_view cls) {
  body_.append("<g");
  if (!cls.empty()) {
    add(body_, {" class=\"", xml_escape(cls), "\""});
  }
  body_.append(">");
  if (!title.empty()) {
    add(body_, {"<title>", xml_escape(title), "</title>"});
  }
  ++open_groups_;
}

void Svg::end_group() {
  if (open_groups_ == 0) {
    throw std::logic_error("Svg: end_group without begin_group");
  }
  body_.append("</g>");
  --open_groups_;
}

std::string Svg::str() const {
  if (open_groups_ != 0) {
    throw std::logic_error("Svg: unclosed group");
  }
  std::string s;
  add(s, {"<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 ", coord(w_), " ", coord(h_),
          "\" class=\"", xml_escape(cls_), "\" role=\"img\" aria-label=\"", xml_escape(label_),
          "\"><title>", xml_escape(label_), "</title>", body_, "</svg>"});
  return s;
}

} // namespace attn::report
