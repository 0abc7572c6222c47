// ScorerPolicy (kvpress's ScorerPress): the base of a policy that only scores. A subclass writes
// each row's score into its head's `scores()` (higher = keep) from the update's keys
// (score_keys) or from attention fed back (score_attention); the eviction is this class's: over
// budget, the lowest-score rows that are neither sinks nor in the recent window go, ties to the
// oldest (policy/eviction.h). The cumulative (H2O) and key-norm policies are scorers; ChunkKV
// scores as H2O but evicts whole chunks, so it overrides evict_head and keeps the protection.
#pragma once

#include <limits>
#include <vector>

#include "policy/eviction.h"
#include "policy/per_head_policy.h"
#include "squeezekv/core/component_params.h"

namespace squeezekv {

// The cache fields a scorer reads for its eviction.
inline constexpr std::string_view kScorerReads[] = {"n_sink", "recent"};

class ScorerPolicy : public PerHeadPolicy {
 public:
  explicit ScorerPolicy(const ComponentParams& params) : n_sink_(params.n_sink), recent_(params.recent) {}

  void evict_head(LayerRows& layer, int head, int budget) override {
    HeadStore& store = layer.heads[size_t(head)];
    evict_lowest(store, budget, protection(layer, budget), store.scores());
  }

  // The scores the eviction reads, +inf for the sinks and the recent window at the layer's budget:
  // the split then keeps what evict_head would, each head to its own count.
  bool keep_priorities(const LayerRows& layer, int head, int budget, bool /*prompt_end*/,
                       std::vector<float>& out) const override {
    const HeadStore& store = layer.heads[size_t(head)];
    const Protection protect = protection(layer, budget);
    out.assign(store.scores(), store.scores() + store.n_slots());
    for (int s = 0; s < store.n_slots(); ++s) {
      if (store.live(s) && protect.covers(store.positions()[s]))
        out[size_t(s)] = std::numeric_limits<float>::infinity();
    }
    return true;
  }

 protected:
  // The sinks and the recent window (a share of budget - n_sink) of a layer at this budget.
  Protection protection(const LayerRows& layer, int budget) const {
    return cumulative_protection(layer.tokens_seen, budget, n_sink_, recent_);
  }

 private:
  int n_sink_;
  double recent_;
};

}  // namespace squeezekv
