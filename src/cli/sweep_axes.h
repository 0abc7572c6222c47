// The sweep axes that `sweep` and `needle` share: one list option per sweepable parameter, named
// by its flag in the plural (--strengths, --kv-types, --chunk-sizes, ...), and --axis NAME=V1,V2
// for any parameter.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

#include "squeezekv/methods/kv_cache_config.h"
#include "squeezekv/eval/sweep.h"

namespace squeezekv::cli {

struct SweepAxisOptions {
  std::map<std::string, std::vector<std::string>> plural;  // --strengths 0.5,1 by parameter name
  std::vector<std::string> axes;                           // --axis name=v1,v2

  // The axes in `spec`, the plural options first (by name), then --axis in the order given.
  void apply(SweepSpec& spec) const;
};

// The parameters a sweep reports: every registered one but the ids and the shape.
bool reported(const ParamSpec& spec);

void add_sweep_axis_options(CLI::App& app, SweepAxisOptions& options);

}  // namespace squeezekv::cli
