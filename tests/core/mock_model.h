// The reference library's mock model (eval/synth.h's mock_key): layer i of L mixes Gaussian keys
// with a constant direction by frac = i / (L - 1), so deeper layers are more concentrated.
#pragma once

#include <vector>

#include "test_util.h"

namespace squeezekv::test {

inline std::vector<float> mock_layer_keys(int layer, int n_layers, int heads, int seq, int dim, uint64_t seed) {
  std::vector<float> keys = normal(size_t(heads) * size_t(seq) * size_t(dim), seed);
  for (float& k : keys) k = mock_key(k, layer, n_layers);
  return keys;
}

}  // namespace squeezekv::test
