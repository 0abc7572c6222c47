#include "policy/cumulative_policy.h"

namespace squeezekv {

void CumulativePolicy::score_keys(LayerRows& layer, const UpdateRows& update) {
  if (source_ == ScoreSource::key_proxy) accumulate_key_proxy(layer, update, decay_, scratch_);
}

void CumulativePolicy::score_attention(LayerRows& layer, int head, const float* probs,
                                       int n_queries, int n_slots) {
  if (source_ == ScoreSource::attention) {
    accumulate_attention(layer.heads[size_t(head)], probs, n_queries, n_slots, decay_);
  }
}

void CumulativePolicy::evict(LayerRows& layer, int budget) {
  const Protection protect = cumulative_protection(layer.tokens_seen, budget, n_sink_, recent_);
  for (HeadStore& head : layer.heads) {
    evict_lowest(head, budget, protect, head.scores());
  }
}

}  // namespace squeezekv
