// GgufValue (engine/gguf_value.h): typed, range-checked access to one GGUF metadata value.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "squeezekv/base/errors.h"
#include "squeezekv/engine/gguf_value.h"

namespace squeezekv {

static_assert(std::endian::native == std::endian::little, "GGUF values are read as little-endian");

std::string_view gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::u8:
      return "uint8";
    case GgufType::i8:
      return "int8";
    case GgufType::u16:
      return "uint16";
    case GgufType::i16:
      return "int16";
    case GgufType::u32:
      return "uint32";
    case GgufType::i32:
      return "int32";
    case GgufType::f32:
      return "float32";
    case GgufType::boolean:
      return "bool";
    case GgufType::string:
      return "string";
    case GgufType::array:
      return "array";
    case GgufType::u64:
      return "uint64";
    case GgufType::i64:
      return "int64";
    case GgufType::f64:
      return "float64";
  }
  return "unknown type";
}

size_t gguf_scalar_size(GgufType type) {
  switch (type) {
    case GgufType::u8:
    case GgufType::i8:
    case GgufType::boolean:
      return 1;
    case GgufType::u16:
    case GgufType::i16:
      return 2;
    case GgufType::u32:
    case GgufType::i32:
    case GgufType::f32:
      return 4;
    case GgufType::u64:
    case GgufType::i64:
    case GgufType::f64:
      return 8;
    case GgufType::string:
    case GgufType::array:
      return 0;
  }
  return 0;
}

namespace {

bool is_signed_type(GgufType t) {
  return t == GgufType::i8 || t == GgufType::i16 || t == GgufType::i32 || t == GgufType::i64;
}

bool is_integer_type(GgufType t) {
  switch (t) {
    case GgufType::u8:
    case GgufType::i8:
    case GgufType::u16:
    case GgufType::i16:
    case GgufType::u32:
    case GgufType::i32:
    case GgufType::u64:
    case GgufType::i64:
      return true;
    default:
      return false;
  }
}

// Decodes one little-endian element of a numeric array; integers sign-extended into the bits.
template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

uint64_t load_integer_bits(GgufType t, const uint8_t* p) {
  switch (t) {
    case GgufType::u8:
    case GgufType::boolean:
      return p[0];
    case GgufType::i8:
      return static_cast<uint64_t>(static_cast<int64_t>(load<int8_t>(p)));
    case GgufType::u16:
      return load<uint16_t>(p);
    case GgufType::i16:
      return static_cast<uint64_t>(static_cast<int64_t>(load<int16_t>(p)));
    case GgufType::u32:
      return load<uint32_t>(p);
    case GgufType::i32:
      return static_cast<uint64_t>(static_cast<int64_t>(load<int32_t>(p)));
    case GgufType::u64:
      return load<uint64_t>(p);
    case GgufType::i64:
      return load<uint64_t>(p);
    default:
      return 0;
  }
}

void append_quoted(std::ostringstream& out, std::string_view s) {
  out << '"';
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out << '\\' << c;
    } else if (u < 0x20 || u == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out << "\\x" << hex[u >> 4] << hex[u & 15];
    } else {
      out << c;
    }
  }
  out << '"';
}

}  // namespace

bool GgufValue::is_integer() const { return is_integer_type(type_); }

void GgufValue::type_mismatch(std::string_view what, std::string_view expected) const {
  std::ostringstream out;
  out << what << " has type " << gguf_type_name(type_);
  if (type_ == GgufType::array) out << " of " << gguf_type_name(elem_type_);
  out << ", expected " << expected;
  throw FormatError(out.str());
}

uint64_t GgufValue::as_u64(std::string_view what) const {
  if (!is_integer()) type_mismatch(what, "uint64");
  if (is_signed_type(type_) && static_cast<int64_t>(bits_) < 0) {
    throw FormatError(std::string(what) + " = " + std::to_string(static_cast<int64_t>(bits_)) +
                      ": must not be negative");
  }
  return bits_;
}

int64_t GgufValue::as_i64(std::string_view what) const {
  if (!is_integer()) type_mismatch(what, "int64");
  if (type_ == GgufType::u64 && bits_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw FormatError(std::string(what) + " = " + std::to_string(bits_) + ": does not fit int64");
  }
  return static_cast<int64_t>(bits_);
}

uint32_t GgufValue::as_u32(std::string_view what) const {
  if (!is_integer()) type_mismatch(what, "uint32");
  uint64_t v = as_u64(what);
  if (v > std::numeric_limits<uint32_t>::max()) {
    throw FormatError(std::string(what) + " = " + std::to_string(v) + ": does not fit uint32");
  }
  return static_cast<uint32_t>(v);
}

int32_t GgufValue::as_i32(std::string_view what) const {
  if (!is_integer()) type_mismatch(what, "int32");
  int64_t v = as_i64(what);
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
    throw FormatError(std::string(what) + " = " + std::to_string(v) + ": does not fit int32");
  }
  return static_cast<int32_t>(v);
}

double GgufValue::as_f64(std::string_view what) const {
  if (!is_float()) type_mismatch(what, "float64");
  return real_;
}

float GgufValue::as_f32(std::string_view what) const {
  if (!is_float()) type_mismatch(what, "float32");
  return static_cast<float>(real_);
}

bool GgufValue::as_bool(std::string_view what) const {
  if (type_ != GgufType::boolean) type_mismatch(what, "bool");
  return bits_ != 0;
}

std::string_view GgufValue::as_string(std::string_view what) const {
  if (type_ != GgufType::string) type_mismatch(what, "string");
  return str_;
}

void GgufValue::require_array(std::string_view what) const {
  if (type_ != GgufType::array) type_mismatch(what, "array");
}

std::span<const std::string_view> GgufValue::strings(std::string_view what) const {
  require_array(what);
  if (elem_type_ != GgufType::string) type_mismatch(what, "array of string");
  return strings_;
}

std::span<const GgufValue> GgufValue::items(std::string_view what) const {
  require_array(what);
  if (elem_type_ != GgufType::array) type_mismatch(what, "array of array");
  return items_;
}

double GgufValue::number_at(size_t i) const {
  if (type_ != GgufType::array || raw_ == nullptr || i >= count_) {
    throw InvalidArgument(invalid_value("array index", i, "not a numeric element of this value"));
  }
  const uint8_t* p = raw_ + i * gguf_scalar_size(elem_type_);
  if (elem_type_ == GgufType::f32) return load<float>(p);
  if (elem_type_ == GgufType::f64) return load<double>(p);
  uint64_t bits = load_integer_bits(elem_type_, p);
  return is_signed_type(elem_type_) ? static_cast<double>(static_cast<int64_t>(bits)) : static_cast<double>(bits);
}

int64_t GgufValue::integer_at(size_t i) const {
  if (type_ != GgufType::array || raw_ == nullptr || i >= count_ ||
      !(is_integer_type(elem_type_) || elem_type_ == GgufType::boolean)) {
    throw InvalidArgument(invalid_value("array index", i, "not an integer element of this value"));
  }
  return static_cast<int64_t>(load_integer_bits(elem_type_, raw_ + i * gguf_scalar_size(elem_type_)));
}

std::vector<float> GgufValue::to_f32s(std::string_view what) const {
  require_array(what);
  if (elem_type_ != GgufType::f32 && elem_type_ != GgufType::f64) {
    type_mismatch(what, "array of float32");
  }
  std::vector<float> out(count_);
  for (size_t i = 0; i < count_; ++i) out[i] = static_cast<float>(number_at(i));
  return out;
}

std::vector<int32_t> GgufValue::to_i32s(std::string_view what) const {
  require_array(what);
  if (!is_integer_type(elem_type_)) type_mismatch(what, "array of int32");
  std::vector<int32_t> out(count_);
  for (size_t i = 0; i < count_; ++i) {
    int64_t v = integer_at(i);
    if (elem_type_ == GgufType::u64 && v < 0) v = std::numeric_limits<int64_t>::max();
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
      throw FormatError(std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(v) +
                        ": does not fit int32");
    }
    out[i] = static_cast<int32_t>(v);
  }
  return out;
}

std::string GgufValue::to_string(size_t max_items) const {
  std::ostringstream out;
  out.precision(9);
  switch (type_) {
    case GgufType::string:
      append_quoted(out, str_);
      break;
    case GgufType::boolean:
      out << (bits_ ? "true" : "false");
      break;
    case GgufType::f32:
    case GgufType::f64:
      out << real_;
      break;
    case GgufType::array: {
      out << '[';
      size_t shown = std::min(count_, max_items);
      for (size_t i = 0; i < shown; ++i) {
        if (i) out << ", ";
        if (elem_type_ == GgufType::string) {
          append_quoted(out, strings_[i]);
        } else if (elem_type_ == GgufType::array) {
          out << items_[i].to_string(max_items);
        } else if (elem_type_ == GgufType::boolean) {
          out << (integer_at(i) ? "true" : "false");
        } else if (elem_type_ == GgufType::u64) {
          out << load<uint64_t>(raw_ + i * 8);
        } else {
          out << number_at(i);
        }
      }
      if (shown < count_) out << (shown ? ", " : "") << "... (" << count_ << " items)";
      out << ']';
      break;
    }
    default:
      if (is_signed_type(type_)) {
        out << static_cast<int64_t>(bits_);
      } else {
        out << bits_;
      }
  }
  return out.str();
}

}  // namespace squeezekv
