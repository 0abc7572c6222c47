// UTF-8 for text squeezekv prints or hands to Python: a token may end in the middle of a
// character (byte-fallback tokens) and a model's vocabulary may hold invalid bytes. valid_utf8
// repairs a string (each invalid sequence becomes U+FFFD); Utf8Stream emits streamed pieces
// without ever splitting a character, holding an incomplete trailing sequence until it completes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace squeezekv {
namespace utf8_detail {

// The sequence starting at s[i]: valid (len bytes), invalid (len = its maximal valid prefix, at
// least 1, replaced by one U+FFFD), or truncated (the input ends inside a sequence valid so far).
struct Sequence {
  enum Kind { valid, invalid, truncated } kind;
  int len;
};

inline Sequence sequence_at(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return {Sequence::valid, 1};
  int len;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {Sequence::invalid, 1};
  }
  for (int k = 1; k < len; ++k) {
    if (i + size_t(k) >= s.size()) return {Sequence::truncated, k};
    const unsigned char b = byte(i + size_t(k));
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return {Sequence::invalid, k};
  }
  return {Sequence::valid, len};
}

}  // namespace utf8_detail

inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

// `text` with every invalid or truncated sequence replaced by U+FFFD (one per maximal bad prefix).
inline std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const utf8_detail::Sequence seq = utf8_detail::sequence_at(text, i);
    if (seq.kind == utf8_detail::Sequence::valid) {
      out.append(text.substr(i, size_t(seq.len)));
    } else {
      out.append(kReplacementCharacter);
    }
    i += size_t(seq.len);
  }
  return out;
}

inline bool is_valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const utf8_detail::Sequence seq = utf8_detail::sequence_at(text, i);
    if (seq.kind != utf8_detail::Sequence::valid) return false;
    i += size_t(seq.len);
  }
  return true;
}

// How many bytes at the end of `text` are the start of a sequence that could still complete
// (0 to 3); those are held back while streaming.
inline size_t incomplete_utf8_tail(std::string_view text) {
  const size_t stop = text.size() > 3 ? text.size() - 3 : 0;
  for (size_t i = text.size(); i > stop; --i) {
    if ((static_cast<unsigned char>(text[i - 1]) & 0xC0) == 0x80) continue;  // a continuation byte
    const utf8_detail::Sequence seq = utf8_detail::sequence_at(text, i - 1);
    return seq.kind == utf8_detail::Sequence::truncated ? text.size() - (i - 1) : 0;
  }
  return 0;
}

// Streams pieces as valid UTF-8: push returns what can be printed now, finish what is left
// (an incomplete sequence at the very end becomes U+FFFD).
class Utf8Stream {
 public:
  std::string push(std::string_view piece) {
    pending_.append(piece);
    const size_t keep = incomplete_utf8_tail(pending_);
    std::string out = valid_utf8(std::string_view(pending_).substr(0, pending_.size() - keep));
    pending_.erase(0, pending_.size() - keep);
    return out;
  }
  std::string finish() {
    std::string out = valid_utf8(pending_);
    pending_.clear();
    return out;
  }

 private:
  std::string pending_;
};

}  // namespace squeezekv
