// How a program of this project turns its command line and its work into an exit code
// (src/model/errors.h): help and version end with 0, anything that is not a result is one line
// on stderr. attn-tune's main and the tools/ programs share it.
#pragma once
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "src/model/errors.h"

namespace attn::cli {

// An error message as the one line it must be: control characters (a newline, an escape
// sequence from a file's tensor name or an environment variable) and bytes that are not UTF-8
// written as \xNN, and the whole cut to about kMessageChars with "..." where it was cut: from the
// middle, so that a reason at the end of a message about a very long path survives.
[[nodiscard]] inline std::string one_line(const std::string& text) {
  constexpr std::size_t kMessageChars = 2000;
  constexpr std::size_t kTailChars = 600;
  std::string out;
  const auto hex = [&](unsigned char c) {
    static const char digits[] = "0123456789abcdef";
    out += "\\x";
    out += digits[c >> 4];
    out += digits[c & 15];
  };
  for (std::size_t i = 0; i < text.size() && out.size() < 64 * kMessageChars; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      hex(c);
      continue;
    }
    if (c < 0x80) {
      out += char(c);
      continue;
    }
    // A well-formed UTF-8 sequence (2 to 4 bytes) is kept whole; anything else byte by byte.
    const std::size_t n = (c & 0xe0) == 0xc0   ? 2
                          : (c & 0xf0) == 0xe0 ? 3
                          : (c & 0xf8) == 0xf0 ? 4
                                               : 0;
    bool ok = n > 0 && i + n <= text.size();
    for (std::size_t k = 1; ok && k < n; ++k) {
      ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
    }
    if (ok) {
      out.append(text, i, n);
      i += n - 1;
    } else {
      hex(c);
    }
  }
  if (out.size() > kMessageChars) {
    const auto continuation = [&](std::size_t at) {
      return (static_cast<unsigned char>(out[at]) & 0xc0) == 0x80;
    };
    std::size_t head = kMessageChars - kTailChars - 3;
    while (head > 0 && continuation(head)) {
      --head; // not inside a UTF-8 sequence
    }
    std::size_t tail = out.size() - kTailChars;
    while (tail < out.size() && continuation(tail)) {
      ++tail;
    }
    out = out.substr(0, head) + "..." + out.substr(tail);
  }
  return out;
}

// A 64-bit unsigned number as typed (--seed): digits only, at most 2^64 - 1. CLI11 would read
// -1 and 2^64 as 2^64 - 1 (wrapped), where a file's reader refuses them.
inline const CLI::Validator& unsigned_64() {
  static const CLI::Validator v(
      [](const std::string& s) {
        uint64_t x = 0;
        const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
        return !s.empty() && s[0] != '-' && s[0] != '+' && ec == std::errc() &&
                       p == s.data() + s.size()
                   ? std::string()
                   : "'" + s + "' is not an integer from 0 to 18446744073709551615";
      },
      "0..2^64-1", "unsigned 64-bit");
  return v;
}

// A number that is one (not NaN): CLI11's Range lets NaN through, every comparison being false.
inline const CLI::Validator& a_number() {
  static const CLI::Validator v(
      [](const std::string& s) {
        char* end = nullptr;
        const double x = std::strtod(s.c_str(), &end);
        return end != s.c_str() && *end == '\0' && std::isfinite(x)
                   ? std::string()
                   : "'" + s + "' is not a finite number";
      },
      "", "finite number");
  return v;
}

// Parses the command line. --help and --version print and end with 0; a bad flag is one line on
// stderr, worded by `message` (CLI11's own words when it is empty), and kExitUsage. nullopt:
// the flags parsed, carry on.
[[nodiscard]] inline std::optional<int>
parse_or_exit(CLI::App& app, int argc, char** argv, const char* name,
              const std::function<std::string(const CLI::ParseError&)>& message = {}) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string what = message ? message(e) : std::string(e.what());
    std::fprintf(stderr, "%s: error: %s (see %s --help)\n", name, one_line(what).c_str(), name);
    return kExitUsage;
  }
  return std::nullopt;
}

// Runs the work and turns what it throws into an exit code and one line on stderr.
[[nodiscard]] inline int run_reporting_errors(const char* name, const std::function<int()>& work) {
  try {
    return work();
  } catch (const InputError& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, one_line(e.what()).c_str());
    return kExitUsage;
  } catch (const KernelFault& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, one_line(e.what()).c_str());
    return kExitMismatch;
  } catch (const DeviceUnavailable& e) {
    std::fprintf(stderr, "%s: device unavailable: %s\n", name, one_line(e.what()).c_str());
    return kExitNoDevice;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", name, one_line(e.what()).c_str());
    return kExitInternal;
  }
}

} // namespace attn::cli
