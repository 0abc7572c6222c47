// A sweep: methods x budgets x any registered parameter's values (strength, score, importance,
// squeeze_fraction, recent, decay, chunk_size, beta, ...) expanded into cache configurations, each
// axis applied only where the method reads the parameter, evaluated together so that one
// full-cache pass serves them all.
#pragma once

#include <string>
#include <vector>

#include "squeezekv/methods/kv_cache_config.h"
#include "squeezekv/eval/perplexity.h"

namespace squeezekv {

// One parameter's values, as text (parsed by the parameter's spec).
struct SweepAxis {
  std::string param;
  std::vector<std::string> values;
};

struct SweepSpec {
  std::vector<std::string> methods;  // empty (or "all" alone): every registered method
  std::vector<int> budgets = {16, 32, 64, 128};
  // Further axes in the order given; a parameter without an axis keeps the base's value.
  std::vector<SweepAxis> axes;
  KVCacheConfig base;  // everything else (sinks, kv type, method parameters)
};

// The configurations, in a fixed order, without duplicates (e.g. `full` once, whatever the
// budgets). snapkv's observation window is capped at half the budget so small budgets stay valid.
// Throws InvalidArgument naming the first bad value or unknown parameter.
std::vector<KVCacheConfig> expand_sweep(const SweepSpec& spec);

// A short label naming what distinguishes a configuration apart from its budget, e.g.
// "squeeze hidden-cosine p=0.3 s=1 attention recent=0.5 decay=0.98 sinks=4": every parameter the
// method reads that has a label in the registry (a line in a plot).
std::string sweep_variant(const KVCacheConfig& config);

}  // namespace squeezekv
