// One GGUF metadata value (GgufValue: a scalar, a string or an array) and the specification's value
// types. Strings and arrays are views into the file's bytes, valid while its GgufFile lives
// (engine/gguf_reader.h); every getter checks the type and range, raising FormatError naming what
// was read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace squeezekv {

// Metadata value types, numbered as in the GGUF specification.
enum class GgufType : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

// "uint32", "string", "array", ...; "type <id>" for ids outside the specification.
std::string_view gguf_type_name(GgufType type);

// Bytes of one scalar of the type; 0 for string and array (variable size) and unknown ids.
size_t gguf_scalar_size(GgufType type);

// One metadata value: a scalar, a string, or an array (of scalars, strings or arrays).
class GgufValue {
 public:
  GgufType type() const { return type_; }
  bool is_integer() const;  // u8..i64 (not bool)
  bool is_float() const { return type_ == GgufType::f32 || type_ == GgufType::f64; }

  // Scalars. Integer getters accept any integer type whose value fits; they throw FormatError
  // (naming `what`, usually "key 'x'") on a type mismatch or a value out of range.
  uint64_t as_u64(std::string_view what = "value") const;
  int64_t as_i64(std::string_view what = "value") const;
  uint32_t as_u32(std::string_view what = "value") const;
  int32_t as_i32(std::string_view what = "value") const;
  double as_f64(std::string_view what = "value") const;  // f32 or f64
  float as_f32(std::string_view what = "value") const;   // f32 or f64
  bool as_bool(std::string_view what = "value") const;
  std::string_view as_string(std::string_view what = "value") const;

  // Arrays.
  GgufType array_type() const { return elem_type_; }  // element type (arrays only)
  size_t size() const { return count_; }              // element count (arrays only)
  std::span<const std::string_view> strings(std::string_view what = "value") const;
  std::span<const GgufValue> items(std::string_view what = "value") const;  // nested arrays
  // Element i of a numeric or bool array, converted (checked) to the requested type.
  double number_at(size_t i) const;
  int64_t integer_at(size_t i) const;
  std::vector<float> to_f32s(std::string_view what = "value") const;
  std::vector<int32_t> to_i32s(std::string_view what = "value") const;

  // Short human-readable rendering; arrays show their first `max_items` elements.
  std::string to_string(size_t max_items = 8) const;

 private:
  friend class GgufParser;
  [[noreturn]] void type_mismatch(std::string_view what, std::string_view expected) const;
  void require_array(std::string_view what) const;

  GgufType type_ = GgufType::u8;
  GgufType elem_type_ = GgufType::u8;
  uint64_t bits_ = 0;  // integer or bool scalar; signed types sign-extended
  double real_ = 0;    // float scalar
  std::string_view str_;
  size_t count_ = 0;
  const uint8_t* raw_ = nullptr;  // numeric/bool array elements, little-endian, unaligned
  std::vector<std::string_view> strings_;
  std::vector<GgufValue> items_;
};

}  // namespace squeezekv
