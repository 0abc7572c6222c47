// StateWriter / StateReader: the bytes of a cache's saved state (engine/cache_file.h puts them in
// a file). Values are written as the host holds them (little-endian x86 and ARM: the file's header
// records the byte order). A reader never reads past its bytes and checks every count against the
// bytes left before it allocates, so a truncated or corrupt state fails with FormatError (naming
// `what` it was reading) instead of allocating or reading out of range.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "squeezekv/base/errors.h"

namespace squeezekv {

class StateWriter {
 public:
  template <class T>
  requires std::is_trivially_copyable_v<T>
  void put(const T& value) { put_bytes(&value, sizeof(T)); }
  template <class T>
  requires std::is_trivially_copyable_v<T>
  void put_vector(std::span<const T> values) {
    put(uint64_t(values.size()));
    put_bytes(values.data(), values.size() * sizeof(T));
  }
  template <class T>
  void put_vector(const std::vector<T>& values) {
    put_vector(std::span<const T>(values));
  }
  void put_string(std::string_view text) { put_vector(std::span<const char>(text.data(), text.size())); }
  void put_bytes(const void* data, size_t n);

  const std::vector<std::byte>& bytes() const { return bytes_; }
  std::vector<std::byte>& bytes() { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
};

class StateReader {
 public:
  explicit StateReader(std::span<const std::byte> bytes) : bytes_(bytes) {}

  template <class T>
  requires std::is_trivially_copyable_v<T> T get(std::string_view what) {
    T value;
    get_bytes(&value, sizeof(T), what);
    return value;
  }
  // A count written by put_vector, checked against the bytes left (elem bytes each) and `most`.
  size_t get_count(size_t elem, uint64_t most, std::string_view what);
  template <class T>
  requires std::is_trivially_copyable_v<T> std::vector<T> get_vector(std::string_view what,
                                                                     uint64_t most = UINT64_MAX) {
    std::vector<T> out(get_count(sizeof(T), most, what));
    get_bytes(out.data(), out.size() * sizeof(T), what);
    return out;
  }
  std::string get_string(std::string_view what, uint64_t most = 1 << 20);
  void get_bytes(void* out, size_t n, std::string_view what);
  // The next n bytes in place (a section's payload), then past them.
  std::span<const std::byte> take(size_t n, std::string_view what);
  // A boolean stored as one byte: 0 or 1, anything else is corrupt.
  bool get_bool(std::string_view what);

  size_t left() const { return bytes_.size() - at_; }
  size_t offset() const { return at_; }
  // Throws FormatError("what: reason") (a state that does not hold together).
  [[noreturn]] static void fail(std::string_view what, std::string_view reason);
  // Throws unless every byte was read.
  void expect_end(std::string_view what) const;

 private:
  std::span<const std::byte> bytes_;
  size_t at_ = 0;
};

// fail() unless ok.
inline void check_state(bool ok, std::string_view what, std::string_view reason) {
  if (!ok) StateReader::fail(what, reason);
}

}  // namespace squeezekv
