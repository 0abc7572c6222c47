#include "policy/cumulative_policy.h"

#include "squeezekv/core/component_info.h"

namespace squeezekv {

namespace {

constexpr MethodInfo kMethods[] = {
    {"h2o_adakv",
     "cumulative",
     "uniform",
     "h2o scores with Ada-KV's split: the layer's best heads x budget rows over its KV heads, a floor each",
     "Constant-memory importance eviction where heads differ in how many rows they need",
     {},
     {},
     false,
     "adakv"},
};

}  // namespace

extern const PolicyInfo cumulative_policy_info = {
    "cumulative",
    "evict the lowest cumulative attention score (H2O heavy hitters)",
    {},
    kCumulativeReads,
    /*scores_rows=*/true,
    [](const ComponentParams& c) -> std::unique_ptr<TokenPolicy> { return std::make_unique<CumulativePolicy>(c); },
    /*validate=*/nullptr,
    kMethods,
    /*keeps_every_row=*/false,
    /*holds_prompt_until_end=*/false,
    /*splits_heads=*/true};

void CumulativePolicy::score_keys(LayerRows& layer, const UpdateRows& update) {
  if (source_ == ScoreSource::key_proxy) accumulate_key_proxy(layer, update, decay_, scratch_);
}

void CumulativePolicy::score_attention(LayerRows& layer, int head, const float* probs, int n_queries, int n_slots) {
  if (source_ == ScoreSource::attention) {
    accumulate_attention(layer.heads[size_t(head)], probs, n_queries, n_slots, decay_);
  }
}

}  // namespace squeezekv
