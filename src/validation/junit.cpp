// The JUnit XML report of verify: a testsuite per device, a testcase per family x configuration
// x case group, with the failing cases' lines as the failure text.
#include "src/validation/junit.h"

#include <ctime>
#include <iomanip>
#include <sstream>
#include <unistd.h>

#include "src/io/atomic_file.h"
#include "src/io/xml_text.h"

namespace attn {


void write_junit(const std::string& path, const std::vector<VerifyReport>& reports,
                 double total_seconds) {
  int tests = 0;
  int failures = 0;
  int skipped = 0;
  for (const auto& r : reports) {
    for (const auto& tc : r.testcases) {
      ++tests;
      failures += tc.failed > 0;
      skipped += (tc.failed == 0 && tc.passed == 0) ? 1 : 0;
    }
  }
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", std::gmtime(&now));

  std::ostringstream x;
  x << std::fixed << std::setprecision(3); // xs:decimal has no exponent form
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x << "<testsuites name=\"attn-tune verify\" tests=\"" << tests << "\" failures=\"" << failures
    << "\" errors=\"0\" skipped=\"" << skipped << "\" time=\"" << total_seconds << "\">\n";
  for (const auto& r : reports) {
    int t = 0, f = 0, s = 0;
    double secs = 0.0;
    std::string device = r.testcases.empty() ? "none" : r.testcases.front().device;
    for (const auto& tc : r.testcases) {
      ++t;
      f += tc.failed > 0;
      s += (tc.failed == 0 && tc.passed == 0) ? 1 : 0;
      secs += tc.seconds;
    }
    x << "  <testsuite name=\"attn-tune verify " << xml_escape(device) << "\" tests=\"" << t
      << "\" failures=\"" << f << "\" errors=\"0\" skipped=\"" << s << "\" time=\"" << secs
      << "\" timestamp=\"" << stamp << "\" hostname=\"" << xml_escape(host) << "\">\n";
    for (const auto& tc : r.testcases) {
      x << "    <testcase classname=\"" << xml_escape(tc.device + "." + tc.family) << "\" name=\""
        << xml_escape(tc.config + " " + tc.group) << "\" time=\"" << tc.seconds << "\">\n";
      if (tc.failed > 0) {
        std::string text;
        for (const auto& line : tc.failures) {
          text += line + "\n";
        }
        x << "      <failure message=\""
          << xml_escape(std::to_string(tc.failed) + " of " + std::to_string(tc.failed + tc.passed) +
                        " cases failed")
          << "\" type=\"mismatch\">" << xml_escape(text) << "</failure>\n";
      } else if (tc.passed == 0) {
        x << "      <skipped message=\"" << xml_escape(tc.skip_reason) << "\"/>\n";
      }
      x << "      <system-out>" << tc.passed << " passed, " << tc.failed << " failed, "
        << tc.skipped << " skipped</system-out>\n";
      x << "    </testcase>\n";
    }
    x << "  </testsuite>\n";
  }
  x << "</testsuites>\n";

  write_file_atomically(path, x.str());
}

} // namespace attn
