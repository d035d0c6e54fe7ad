// The JUnit XML report of verify: a testsuite per device, a testcase per family x configuration
// x case group, with the failing cases' lines as the failure text: a <failure> where some case
// computed a wrong result, an <error> where every failing case crashed, hung or could not run.
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
  const auto is_error = [](const VerifyTestcase& tc) {
    return tc.failed > 0 && tc.faults == tc.failed;
  };
  int tests = 0;
  int failures = 0;
  int errors = 0;
  int skipped = 0;
  for (const auto& r : reports) {
    for (const auto& tc : r.testcases) {
      ++tests;
      failures += tc.failed > 0 && !is_error(tc);
      errors += is_error(tc);
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
    << "\" errors=\"" << errors << "\" skipped=\"" << skipped << "\" time=\"" << total_seconds
    << "\">\n";
  for (const auto& r : reports) {
    int t = 0, f = 0, e = 0, s = 0;
    double secs = 0.0;
    std::string device = r.testcases.empty() ? "none" : r.testcases.front().device;
    for (const auto& tc : r.testcases) {
      ++t;
      f += tc.failed > 0 && !is_error(tc);
      e += is_error(tc);
      s += (tc.failed == 0 && tc.passed == 0) ? 1 : 0;
      secs += tc.seconds;
    }
    x << "  <testsuite name=\"attn-tune verify " << xml_escape(device) << "\" tests=\"" << t
      << "\" failures=\"" << f << "\" errors=\"" << e << "\" skipped=\"" << s << "\" time=\""
      << secs << "\" timestamp=\"" << stamp << "\" hostname=\"" << xml_escape(host) << "\">\n";
    for (const auto& tc : r.testcases) {
      x << "    <testcase classname=\"" << xml_escape(tc.device + "." + tc.family) << "\" name=\""
        << xml_escape(tc.config + " " + tc.group) << "\" time=\"" << tc.seconds << "\">\n";
      if (tc.failed > 0) {
        std::string text;
        for (const auto& line : tc.failures) {
          text += line + "\n";
        }
        const char* tag = is_error(tc) ? "error" : "failure";
        x << "      <" << tag << " message=\""
          << xml_escape(std::to_string(tc.failed) + " of " + std::to_string(tc.failed + tc.passed) +
                        " cases failed" +
                        (tc.faults > 0
                             ? " (" + std::to_string(tc.faults) + " crashed, hung or could not run)"
                             : std::string()))
          << "\" type=\"" << (is_error(tc) ? "fault" : "mismatch") << "\">" << xml_escape(text)
          << "</" << tag << ">\n";
      } else if (tc.passed == 0) {
        x << "      <skipped message=\"" << xml_escape(tc.skip_reason) << "\"/>\n";
      }
      x << "      <system-out>" << tc.passed << " passed, " << tc.failed << " failed, "
        << tc.skipped << " skipped"
        << (tc.skipped > 0 ? xml_escape(" (" + tc.skip_reason + ")") : std::string())
        << (tc.not_run > 0 ? ", " + std::to_string(tc.not_run) + " " + kNotRunWhy : std::string())
        << "</system-out>\n";
      x << "    </testcase>\n";
    }
    x << "  </testsuite>\n";
  }
  x << "</testsuites>\n";

  write_file_atomically(path, x.str());
}

} // namespace attn
