// Error types of squeezekv. Every error names the parameter or field at fault and its value, so
// the message alone tells the user what to fix; the command line turns any of them into exit 2.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace squeezekv {

// Base of every error squeezekv raises on bad input.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A parameter, shape or value passed by the caller is out of its domain.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A file (GGUF model, text) is missing, truncated or malformed.
class FormatError : public Error {
 public:
  using Error::Error;
};

// Builds "name = value: why" messages, e.g. invalid_value("strength", 1.5, "must lie in [0, 1]").
template <typename T>
std::string invalid_value(std::string_view name, const T& value, std::string_view why) {
  std::ostringstream out;
  out << name << " = " << value << ": " << why;
  return out.str();
}

// Throws InvalidArgument(invalid_value(...)) unless ok.
template <typename T>
void require(bool ok, std::string_view name, const T& value, std::string_view why) {
  if (!ok) throw InvalidArgument(invalid_value(name, value, why));
}

}  // namespace squeezekv
