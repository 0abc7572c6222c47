// ParamSpec: one named cache parameter as every interface sees it (name, type, default, range,
// one line of help). The registry (methods/registry.h) owns the list; the command line, the C API,
// Python, the sweep and `squeezekv methods` are generated from it, so a parameter is declared once.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

namespace squeezekv {

enum class ParamKind : uint8_t {
  integer,  // int64 in the map, int where a field holds it
  real,     // double, finite
  choice,   // one of `choices`
  text,     // free text (method, policy and allocator ids, validated by the registry)
};

// A parameter's value: integers, reals, and text for choices and ids.
using ParamValue = std::variant<int64_t, double, std::string>;

struct ParamSpec {
 public:
  std::string_view name;  // snake_case: the C++, C and Python name
  ParamKind kind;
  std::string_view default_value;  // as text, e.g. "8", "0.98", "key-proxy"
  std::string_view help;           // one line
  double min = 0.0, max = 0.0;     // integer and real: the accepted range
  bool min_open = false;           // (min, max] instead of [min, max]
  std::span<const std::string_view> choices = {};
  std::string_view flag = {};   // command-line flag without "--" when not the name with '-'
  bool on_command_line = true;  // false: a library-only parameter (e.g. resolved_budget)
  bool optional = false;        // integer that may be unset ("none")
  // A rule beyond the range (e.g. "odd"); throws InvalidArgument naming the parameter.
  void (*extra)(const ParamSpec& spec, const ParamValue& value) = nullptr;
  // In a sweep variant's label: "label=value" ("" = left out; a choice whose label is its name
  // shows its value alone, e.g. "attention"), omitted
  // when the value's text equals omit_if.
  std::string_view label = {};
  std::string_view omit_if = {};

  std::string cli_flag() const;    // "--chunk-size"
  std::string range_text() const;  // "must lie in [0, 1]", "must be one of ..."
  // Parses text into this parameter's kind; throws InvalidArgument naming the parameter.
  ParamValue parse(std::string_view text) const;
  // Throws InvalidArgument("name = value: range") when the value is outside the range.
  void check(const ParamValue& value) const;
  ParamValue default_parsed() const { return parse(default_value); }

 private:
  void check_kind(const ParamValue& value) const;
};

// "8", "0.98" (shortest text that reads back the same double), "key-proxy".
std::string format_value(const ParamValue& value);

}  // namespace squeezekv
