#include "squeezekv/core/component_params.h"

#include <string>
#include <variant>

#include "squeezekv/base/errors.h"

namespace squeezekv {
namespace {

const ParamValue& find_own(const ComponentParams& params, std::string_view name) {
  const auto it = params.own.find(name);
  if (it == params.own.end()) {
    throw InvalidArgument(std::string(name) + ": not a parameter of this component");
  }
  return it->second;
}

}  // namespace

int64_t ComponentParams::get_int(std::string_view name) const {
  const ParamValue& v = find_own(*this, name);
  require(std::holds_alternative<int64_t>(v), name, format_value(v), "is not an integer parameter");
  return std::get<int64_t>(v);
}

double ComponentParams::get_real(std::string_view name) const {
  const ParamValue& v = find_own(*this, name);
  if (const auto* i = std::get_if<int64_t>(&v)) return double(*i);
  require(std::holds_alternative<double>(v), name, format_value(v), "is not a numeric parameter");
  return std::get<double>(v);
}

std::string ComponentParams::get_text(std::string_view name) const { return format_value(find_own(*this, name)); }

}  // namespace squeezekv
