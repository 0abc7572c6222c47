#include "cli/sweep_axes.h"

#include <sstream>

#include "squeezekv/base/errors.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv::cli {

bool reported(const ParamSpec& spec) {
  return spec.kind != ParamKind::text && spec.name != "head_dim" && spec.name != "resolved_budget";
}

void SweepAxisOptions::apply(SweepSpec& spec) const {
  spec.axes.clear();
  for (const auto& [name, values] : plural) {
    if (!values.empty()) spec.axes.push_back({name, values});
  }
  for (const std::string& axis : axes) {
    const size_t eq = axis.find('=');
    require(eq != std::string::npos && eq > 0, "--axis", axis, "expected NAME=V1,V2,... (a parameter name)");
    SweepAxis parsed{axis.substr(0, eq), {}};
    std::stringstream in(axis.substr(eq + 1));
    for (std::string item; std::getline(in, item, ',');) parsed.values.push_back(item);
    spec.axes.push_back(std::move(parsed));
  }
}

void add_sweep_axis_options(CLI::App& app, SweepAxisOptions& o) {
  for (const ParamSpec* spec : all_params()) {
    const std::string flag = spec->cli_flag();
    if (!reported(*spec) || !spec->on_command_line || spec->name == "budget" || flag.back() == 's') continue;
    app.add_option(
           flag + "s", o.plural[std::string(spec->name)],
           std::string(spec->name) + " values to sweep, where the method reads it; default: the single cache option")
        ->delimiter(',')
        ->group("Sweep axes");
  }
  app.add_option("--axis", o.axes, "any parameter's values: NAME=V1,V2,... (repeatable)")->group("Sweep axes");
}

}  // namespace squeezekv::cli
