// Cumulative-score policy (H2O, Zhang et al. 2023, arXiv:2306.14048): each row's score is the
// attention it has received so far; over budget, evict the lowest-score row that is neither a sink
// nor in the recent window. Parameters: n_sink, recent (share of budget - n_sink), decay, score.
#pragma once

#include "policy/scorer_policy.h"

namespace squeezekv {

// The cache fields a cumulative policy reads (its subclasses too).
inline constexpr std::string_view kCumulativeReads[] = {"n_sink", "recent", "decay", "score"};

class CumulativePolicy : public ScorerPolicy {
 public:
  explicit CumulativePolicy(const ComponentParams& params)
      : ScorerPolicy(params), decay_(float(params.decay)), source_(params.score) {}
  std::string_view name() const override { return "cumulative"; }
  bool wants_attention() const override { return source_ == ScoreSource::attention; }
  void score_keys(LayerRows& layer, const UpdateRows& update) override;
  void score_attention(LayerRows& layer, int head, const float* probs, int n_queries, int n_slots) override;

 private:
  float decay_;
  ScoreSource source_;
  KeyProxyScratch scratch_;
};

}  // namespace squeezekv
