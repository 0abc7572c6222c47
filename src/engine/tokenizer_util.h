// Helpers shared by the tokenizer sources: UTF-8 lengths and GPT-2's byte <-> unicode mapping.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace squeezekv::tokenizer_util {

// Length of the UTF-8 sequence starting with byte b, from its high four bits as llama.cpp does
// (continuation bytes count 1, so malformed text still advances), clamped by the caller.
inline size_t utf8_len(unsigned char b) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[b >> 4];
}

// GPT-2 byte-level BPE: the printable unicode character standing for byte b (UTF-8 encoded).
std::string_view byte_to_unicode(uint8_t b);

// Appends the bytes a byte-level token text stands for; characters outside the mapping are
// copied through unchanged.
void append_unicode_bytes(std::string_view text, std::string& out);

}  // namespace squeezekv::tokenizer_util
