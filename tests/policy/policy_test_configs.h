// Shared by the policy tests: a method's config with hand-checkable defaults, and random decode
// steps that feed a layer one token at a time.
#pragma once

#include <cstdint>
#include <string>

#include "squeezekv/cache/layer_cache.h"
#include "squeezekv/methods/kv_cache_config.h"
#include "test_util.h"

namespace squeezekv::test {

inline KVCacheConfig method(const std::string& id, int budget, int n_sink, int dim = 8) {
  KVCacheConfig c;
  c.method = id;
  c.budget = budget;
  c.n_sink = n_sink;
  c.head_dim = dim;
  c.decay = 1.0;  // hand-checked sums are undecayed
  return c;
}

// Feeds n single-token updates of random keys and values.
inline void decode(LayerCache& cache, int n, uint64_t seed) {
  const int per = cache.n_heads() * cache.config().head_dim;
  for (int t = 0; t < n; ++t) {
    const auto k = normal(size_t(per), seed + uint64_t(t)), v = normal(size_t(per), seed + 777 + uint64_t(t));
    cache.update(k.data(), v.data(), 1);
  }
}

}  // namespace squeezekv::test
