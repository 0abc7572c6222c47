// A policy whose heads share nothing: it scores and evicts each head from that head's rows alone,
// so evict() is evict_head() over the heads, and the cache may run the heads at once on its pool
// (TokenPolicy::heads_independent). The cumulative, chunked, positional and key-norm policies are.
#pragma once

#include "squeezekv/policy/token_policy.h"

namespace squeezekv {

class PerHeadPolicy : public TokenPolicy {
 public:
  bool heads_independent() const final { return true; }
  void evict(LayerRows& layer, int budget) final {
    for (int h = 0; h < int(layer.heads.size()); ++h) evict_head(layer, h, budget);
  }
  void evict_head(LayerRows& layer, int head, int budget) override = 0;
};

}  // namespace squeezekv
