#include "squeezekv/core/state_stream.h"

#include <string>

namespace squeezekv {

void StateWriter::put_bytes(const void* data, size_t n) {
  if (n == 0) return;
  const auto* p = static_cast<const std::byte*>(data);
  bytes_.insert(bytes_.end(), p, p + n);
}

void StateReader::fail(std::string_view what, std::string_view reason) {
  throw FormatError(std::string(what) + ": " + std::string(reason));
}

void StateReader::get_bytes(void* out, size_t n, std::string_view what) {
  if (n > left()) {
    fail(what, "truncated (" + std::to_string(n) + " bytes needed, " + std::to_string(left()) + " left)");
  }
  if (n > 0) std::memcpy(out, bytes_.data() + at_, n);
  at_ += n;
}

std::span<const std::byte> StateReader::take(size_t n, std::string_view what) {
  if (n > left()) {
    fail(what, "truncated (" + std::to_string(n) + " bytes needed, " + std::to_string(left()) + " left)");
  }
  const std::span<const std::byte> out = bytes_.subspan(at_, n);
  at_ += n;
  return out;
}

size_t StateReader::get_count(size_t elem, uint64_t most, std::string_view what) {
  const auto n = get<uint64_t>(what);
  if (n > most) fail(what, "count " + std::to_string(n) + " exceeds " + std::to_string(most));
  if (elem > 0 && n > left() / elem) {
    fail(what, "count " + std::to_string(n) + " exceeds the " + std::to_string(left()) + " bytes left");
  }
  return size_t(n);
}

std::string StateReader::get_string(std::string_view what, uint64_t most) {
  std::string out(get_count(1, most, what), '\0');
  get_bytes(out.data(), out.size(), what);
  return out;
}

bool StateReader::get_bool(std::string_view what) {
  const auto b = get<uint8_t>(what);
  check_state(b <= 1, what, "a flag holds " + std::to_string(b));
  return b == 1;
}

void StateReader::expect_end(std::string_view what) const {
  check_state(left() == 0, what, std::to_string(left()) + " bytes beyond its end");
}

}  // namespace squeezekv
