#include "squeezekv/core/param_spec.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "squeezekv/base/errors.h"

namespace squeezekv {
namespace {

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  // The shortest of %g's precisions that reads back the same double.
  for (int digits = 1; digits < 17; ++digits) {
    char shorter[32];
    std::snprintf(shorter, sizeof shorter, "%.*g", digits, x);
    if (std::strtod(shorter, nullptr) == x) return shorter;
  }
  return buf;
}

std::string choice_list(std::span<const std::string_view> choices) {
  std::string out;
  for (std::string_view c : choices) {
    if (!out.empty()) out += ", ";
    out += c;
  }
  return out;
}

}  // namespace

std::string ParamSpec::cli_flag() const {
  std::string out = "--";
  out += flag.empty() ? name : flag;
  for (char& c : out) {
    if (c == '_') c = '-';
  }
  return out;
}

std::string ParamSpec::range_text() const {
  switch (kind) {
    case ParamKind::choice:
      return "must be one of " + choice_list(choices);
    case ParamKind::text:
      return "must be a registered id";
    case ParamKind::integer:
    case ParamKind::real: {
      const bool unbounded = std::isinf(max);
      if (unbounded) return (min_open ? "must exceed " : "must be at least ") + number(min);
      return "must lie in " + std::string(min_open ? "(" : "[") + number(min) + ", " + number(max) + "]";
    }
  }
  return {};
}

ParamValue ParamSpec::parse(std::string_view text) const {
  if (optional && (text == "none" || text.empty())) return std::string("none");
  // Built piece by piece: chained operator+ on strings trips a false -Wrestrict in g++ 12.
  std::string quoted(1, '"');
  quoted += text;
  quoted += '"';
  switch (kind) {
    case ParamKind::integer: {
      int64_t value = 0;
      const char* end = text.data() + text.size();
      const auto [ptr, ec] = std::from_chars(text.data(), end, value);
      require(ec == std::errc() && ptr == end && !text.empty(), name, quoted,
              ec == std::errc::result_out_of_range ? "out of range for a 64-bit integer" : "expected an integer");
      return value;
    }
    case ParamKind::real: {
      const std::string copy(text);
      char* end = nullptr;
      const double value = copy.empty() ? 0.0 : std::strtod(copy.c_str(), &end);
      require(!copy.empty() && end == copy.c_str() + copy.size(), name, quoted, "expected a number");
      return value;
    }
    case ParamKind::choice:
    case ParamKind::text:
      return std::string(text);
  }
  return std::string(text);
}

void ParamSpec::check(const ParamValue& value) const {
  check_kind(value);
  if (extra) extra(*this, value);
}

void ParamSpec::check_kind(const ParamValue& value) const {
  switch (kind) {
    case ParamKind::integer: {
      if (optional && std::holds_alternative<std::string>(value) && std::get<std::string>(value) == "none") return;
      require(std::holds_alternative<int64_t>(value), name, format_value(value), "expected an integer");
      const auto v = double(std::get<int64_t>(value));
      require(v >= min && v <= max && !(min_open && v == min), name, std::get<int64_t>(value), range_text());
      return;
    }
    case ParamKind::real: {
      double v = 0.0;
      if (const auto* i = std::get_if<int64_t>(&value)) v = double(*i);
      else if (const auto* d = std::get_if<double>(&value)) v = *d;
      else require(false, name, format_value(value), "expected a number");
      require(std::isfinite(v) && v >= min && v <= max && !(min_open && v == min), name, v, range_text());
      return;
    }
    case ParamKind::choice: {
      require(std::holds_alternative<std::string>(value), name, format_value(value), range_text());
      const std::string& s = std::get<std::string>(value);
      for (std::string_view c : choices) {
        if (c == s) return;
      }
      require(false, name, s, "expected " + choice_list(choices));
      return;
    }
    case ParamKind::text:
      require(std::holds_alternative<std::string>(value), name, format_value(value), "expected text");
      return;
  }
}

std::string format_value(const ParamValue& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&value)) return number(*d);
  return std::get<std::string>(value);
}

}  // namespace squeezekv
