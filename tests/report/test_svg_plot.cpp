// Tests of the report's drawing primitives: escaping, number formats, axis ticks and the SVG
// builder's well-formed output.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "src/report/svg_plot.h"

namespace attn::report {
namespace {

TEST(SvgPlot, EscapesMarkup) {
  EXPECT_EQ(xml_escape("a<b & \"c\" > 'd'"), "a&lt;b &amp; &quot;c&quot; &gt; &#39;d&#39;");
  EXPECT_EQ(xml_escape("decode_v2[partition=512]"), "decode_v2[partition=512]");
}

// What XML 1.0 cannot hold is made visible, never passed on: control characters (a plugin named
// "\x01"), bytes that are not UTF-8, surrogates and U+FFFF; UTF-8 text stays as it is.
TEST(SvgPlot, EscapesWhatXmlCannotHold) {
  EXPECT_EQ(xml_escape(std::string("plug\x01in\x1b\tok\n", 12)), "plug\\x01in\\x1B\tok\n");
  EXPECT_EQ(xml_escape(std::string("a\0b", 3)), "a\\x00b");
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(xml_escape("\xff\xfe"), fffd + fffd);
  EXPECT_EQ(xml_escape("\xC0\xAF"), fffd + fffd);         // overlong '/'
  EXPECT_EQ(xml_escape("\xED\xA0\x80"), fffd + fffd + fffd); // a surrogate
  EXPECT_EQ(xml_escape("\xEF\xBF\xBF"), fffd + fffd + fffd); // U+FFFF
  EXPECT_EQ(xml_escape("\xE4\xB8\xAD\xF0\x9F\x98\x80 H100"), "\xE4\xB8\xAD\xF0\x9F\x98\x80 H100");
  EXPECT_EQ(xml_escape("cut \xE4\xB8"), "cut " + fffd + fffd);
}

TEST(SvgPlot, FormatsNumbers) {
  EXPECT_EQ(format_sig(0.000123456), "0.000123");
  EXPECT_EQ(format_sig(1234.6), "1235");
  EXPECT_EQ(format_sig(20.01), "20");
  EXPECT_EQ(format_sig(1.5), "1.5");
  EXPECT_EQ(format_sig(0.0), "0");
  EXPECT_EQ(format_seconds(2.12e-5), "21.2 \u00b5s");
  EXPECT_EQ(format_seconds(1.08e-3), "1.08 ms");
  EXPECT_EQ(format_seconds(3.1), "3.1 s");
  EXPECT_EQ(format_percent(0.123), "+12.3%");
  EXPECT_EQ(format_percent(1.5), "+150%");
  EXPECT_EQ(format_percent(0.0), "0%");
  EXPECT_EQ(format_percent(-0.05), "-5.0%");
  EXPECT_EQ(format_count(4096), "4k");
  EXPECT_EQ(format_count(3000), "3000");
  EXPECT_EQ(format_count(512), "512");
  EXPECT_EQ(coord(12.0), "12");
  EXPECT_EQ(coord(12.345), "12.35");
  EXPECT_EQ(coord(-0.001), "0");
}

TEST(SvgPlot, LogAxesMapEndsAndTickRoundValues) {
  const LogAxis x{64, 4096, 0, 600};
  EXPECT_DOUBLE_EQ(x(64), 0);
  EXPECT_DOUBLE_EQ(x(4096), 600);
  EXPECT_NEAR(x(512), 300, 1e-9); // halfway in log: 64 * 8 = 512, 512 * 8 = 4096
  const LogAxis y{1e-5, 1e-3, 300, 0};
  EXPECT_NEAR(y(1e-4), 150, 1e-9);

  const std::vector<double> t = log10_ticks(15e-6, 1.2e-3);
  ASSERT_FALSE(t.empty());
  EXPECT_DOUBLE_EQ(t.front(), 2e-5);
  EXPECT_DOUBLE_EQ(t.back(), 1e-3);
  EXPECT_LE(t.size(), 8u);
  // Many decades: only the powers of ten.
  for (double v : log10_ticks(1e-7, 10)) {
    EXPECT_NEAR(std::log10(v), std::round(std::log10(v)), 1e-9) << v;
  }

  EXPECT_EQ(log2_ticks(40, 6000), (std::vector<double>{64, 128, 256, 512, 1024, 2048, 4096}));
  EXPECT_LE(log2_ticks(1, 1 << 20).size(), 9u);
}

TEST(SvgPlot, LinearTicksEndPastTheData) {
  const std::vector<double> t = linear_ticks(0, 10.8);
  EXPECT_DOUBLE_EQ(t.front(), 0);
  EXPECT_GE(t.back(), 10.8);
  EXPECT_LE(t.size(), 7u);
  for (std::size_t i = 1; i < t.size(); ++i) {
    EXPECT_NEAR(t[i] - t[i - 1], t[1] - t[0], 1e-9);
  }
  EXPECT_EQ(linear_ticks(0, 264, 6), (std::vector<double>{0, 100, 200, 300}));
}

TEST(SvgPlot, BuildsWellFormedSvg) {
  Svg svg(100, 50, "chart x", "a <label>");
  svg.begin_group("tip & more");
  svg.rect(1, 2, 3, 4, "c-v1", "fill-opacity:0.5");
  svg.end_group();
  svg.text(5, 6, "a<b", "lbl", "middle");
  svg.polyline({0, 0, 10, 10}, "s-v1");
  const std::string s = svg.str();
  EXPECT_EQ(s.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 100 50\"", 0), 0u);
  EXPECT_NE(s.find("<title>a &lt;label&gt;</title>"), std::string::npos);
  EXPECT_NE(s.find("<g><title>tip &amp; more</title><rect x=\"1\" y=\"2\" width=\"3\" "
                   "height=\"4\" class=\"c-v1\" style=\"fill-opacity:0.5\"/></g>"),
            std::string::npos);
  EXPECT_NE(s.find("text-anchor=\"middle\">a&lt;b</text>"), std::string::npos);
  EXPECT_NE(s.find("points=\"0,0 10,10\""), std::string::npos);
  EXPECT_EQ(s.substr(s.size() - 6), "</svg>");

  Svg open(10, 10, "c", "l");
  open.begin_group("x");
  EXPECT_THROW((void)open.str(), std::logic_error);
  EXPECT_THROW(open.polygon({1, 2, 3}, "c"), std::logic_error);
}

} // namespace
} // namespace attn::report
