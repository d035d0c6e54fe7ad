// Text made safe for XML 1.0 (the report's HTML and SVG, verify's JUnit file): markup characters
// escaped, and whatever XML 1.0 does not allow in a document made visible instead of passed on:
// control characters other than tab, newline and carriage return become "\xNN", byte sequences
// that are not UTF-8 (and code points XML excludes: surrogates, U+FFFE, U+FFFF) become U+FFFD.
// A device, profile, configuration or plugin name, or a failure reason, can hold any bytes.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace attn {

[[nodiscard]] inline std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const char* replacement = "\xEF\xBF\xBD"; // U+FFFD
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02X", unsigned(c));
          out += buf;
        } else {
          out += char(c);
        }
      }
      ++i;
      continue;
    }
    // A multi-byte UTF-8 sequence: its length from the lead byte, then its continuation bytes.
    const int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
    uint32_t cp = len == 4 ? c & 0x07u : len == 3 ? c & 0x0Fu : c & 0x1Fu;
    bool ok = len > 0 && i + std::size_t(len) <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + std::size_t(k)]);
      ok = (b & 0xC0u) == 0x80u;
      cp = (cp << 6) | (b & 0x3Fu);
    }
    // Overlong forms, surrogates, beyond U+10FFFF and the two non-characters XML excludes.
    ok = ok && !(len == 3 && cp < 0x800) && !(len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) &&
         !(cp >= 0xD800 && cp <= 0xDFFF) && cp != 0xFFFE && cp != 0xFFFF;
    if (ok) {
      out.append(s.substr(i, std::size_t(len)));
      i += std::size_t(len);
    } else {
      out += replacement;
      ++i;
    }
  }
  return out;
}

} // namespace attn
