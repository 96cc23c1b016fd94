// Whether bytes are valid UTF-8 (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF).
// Paths are bytes on Linux, but the store, the worker protocol and --json output carry them as
// JSON text, which must be UTF-8: a path that is not is refused where it enters, by name.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace sweep {

inline bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  auto cont = [&](size_t k) { return k < n && (byte(k) & 0xC0) == 0x80; };
  while (i < n) {
    const unsigned char c = byte(i);
    if (c < 0x80) {
      ++i;
    } else if (c >= 0xC2 && c <= 0xDF) {
      if (!cont(i + 1)) return false;
      i += 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      if (!cont(i + 1) || !cont(i + 2)) return false;
      const unsigned char c1 = byte(i + 1);
      if (c == 0xE0 && c1 < 0xA0) return false;  // overlong
      if (c == 0xED && c1 > 0x9F) return false;  // a surrogate
      i += 3;
    } else if (c >= 0xF0 && c <= 0xF4) {
      if (!cont(i + 1) || !cont(i + 2) || !cont(i + 3)) return false;
      const unsigned char c1 = byte(i + 1);
      if (c == 0xF0 && c1 < 0x90) return false;  // overlong
      if (c == 0xF4 && c1 > 0x8F) return false;  // past U+10FFFF
      i += 4;
    } else {
      return false;  // a continuation byte first, C0/C1 (overlong), or F5..FF
    }
  }
  return true;
}

// `s` as UTF-8 text: each byte that is not part of a valid character as \xNN. With `lossless`,
// a backslash is written \\ too, so that two different byte strings never give the same text
// (a key); without, the text is for a message.
inline std::string Utf8Text(std::string_view s, bool lossless = false) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    while (len <= 4 && i + len <= s.size() && !IsValidUtf8(s.substr(i, len))) ++len;
    if (len <= 4 && i + len <= s.size()) {
      if (lossless && s[i] == '\\') out += '\\';
      out.append(s, i, len);
      i += len;
    } else {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned char>(s[i]));
      out += buf;
      ++i;
    }
  }
  return out;
}

}  // namespace sweep
