// A sweep: methods x budgets (x strengths, score sources, importances, squeeze fractions, recent
// windows, decays) expanded into cache configurations, each axis applied only where the method
// reads it, evaluated together so that one full-cache pass serves them all.
#pragma once

#include <string>
#include <vector>

#include "squeezekv/core/kv_cache_config.h"
#include "squeezekv/eval/perplexity.h"

namespace squeezekv {

struct SweepSpec {
  std::vector<std::string> methods = {"full", "h2o", "squeeze", "pyramidkv", "chunkkv", "tova",
                                      "streaming", "window", "snapkv"};
  std::vector<int> budgets = {16, 32, 64, 128};
  // The other axes; an empty list means the base configuration's value.
  std::vector<double> strengths;        // squeeze allocator
  std::vector<ScoreSource> scores;      // policies that score rows
  std::vector<Importance> importances;  // squeeze allocator
  std::vector<double> fractions;        // squeeze with hidden-cosine
  std::vector<double> recents;          // cumulative and chunked policies
  std::vector<double> decays;           // cumulative and chunked policies
  KVCacheConfig base;  // everything else (sinks, kv type, method parameters)
};

// The configurations, in a fixed order, without duplicates (e.g. `full` once, whatever the
// budgets). snapkv's observation window is capped at half the budget so small budgets stay valid.
// Throws InvalidArgument naming the first bad value.
std::vector<KVCacheConfig> expand_sweep(const SweepSpec& spec);

// A short label naming what distinguishes a configuration apart from its budget, e.g.
// "squeeze hidden-cosine p=0.3 attention" (the line it belongs to in a plot).
std::string sweep_variant(const KVCacheConfig& config);

}  // namespace squeezekv
