// Quoting text taken from an input file in a message: a short, escaped excerpt, so that a corrupt
// file can neither flood the terminal nor put invalid UTF-8 into an error.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace squeezekv {

inline constexpr size_t kExcerptBytes = 64;

// 'text' with bytes outside printable ASCII (and ' and \) as \xNN, cut after max_bytes with a
// note of the full length.
inline std::string quoted_excerpt(std::string_view text, size_t max_bytes = kExcerptBytes) {
  static const char* hex = "0123456789abcdef";
  std::string out = "'";
  for (char c : text.substr(0, max_bytes)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f || c == '\\' || c == '\'') {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  out += "'";
  if (text.size() > max_bytes) {
    out += " (first " + std::to_string(max_bytes) + " of " + std::to_string(text.size()) + " bytes)";
  }
  return out;
}

}  // namespace squeezekv
