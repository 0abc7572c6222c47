// ComponentParams: what a token policy or a layer allocator is built from. The cache fields any
// component may read, and the component's own parameters, each already resolved (set by the
// caller, else the method's override, else the registered default) by the registry
// (methods/registry.h). Components read these typed values only: resolving a name needs the
// registry, a layer above them, so a component never asks the configuration itself.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "squeezekv/core/cache_choices.h"
#include "squeezekv/core/param_spec.h"

namespace squeezekv {

struct ComponentParams {
  int budget = 0;  // average rows per layer and KV head
  int n_sink = 0;  // first positions never evicted
  int head_dim = 0;
  double recent = 0.0;  // share of (budget - n_sink) kept as the newest rows
  double decay = 1.0;   // cumulative score decay
  ScoreSource score = ScoreSource::key_proxy;
  // The component's own parameters by name, every one of them present.
  std::map<std::string, ParamValue, std::less<>> own{};

  // By name; InvalidArgument naming the parameter when the component does not own it or it is
  // of another kind.
  int64_t get_int(std::string_view name) const;
  double get_real(std::string_view name) const;       // integers widened
  std::string get_text(std::string_view name) const;  // any kind, formatted
};

}  // namespace squeezekv
