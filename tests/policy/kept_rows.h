// The policy tests' view of a head: the text positions it keeps, oldest first.
#pragma once

#include <cstdint>
#include <vector>

#include "squeezekv/cache/layer_cache.h"

namespace squeezekv {

inline std::vector<int64_t> kept(const LayerCache& cache, int h = 0) {
  std::vector<int64_t> out;
  const HeadStore& head = cache.head(h);
  for (int s : head.slots_by_position()) out.push_back(head.positions()[s]);
  return out;
}

}  // namespace squeezekv
