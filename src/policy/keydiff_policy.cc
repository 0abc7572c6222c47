// KeyDiff (Park et al. 2025, arXiv:2504.15364; kvpress's KeyDiffPress): keys that point away from
// the others are the distinctive ones, so over budget the rows whose keys are most similar in
// direction to the mean of the head's normalised keys go first (score: minus the cosine between a
// row's key and that mean). The mean is taken over the rows the head holds at each eviction, so it
// follows the cache as it changes; sinks and the recent window are protected as for every scorer,
// ties go to the oldest. It reads keys only: no attention, no query, no extra pass.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "policy/scorer_policy.h"
#include "squeezekv/core/component_info.h"

namespace squeezekv {
namespace {

class KeyDiffPolicy final : public ScorerPolicy {
 public:
  explicit KeyDiffPolicy(const ComponentParams& params) : ScorerPolicy(params) {}
  std::string_view name() const override { return "keydiff"; }

  void evict_head(LayerRows& layer, int head, int budget) override {
    HeadStore& store = layer.heads[size_t(head)];
    if (store.n_live() <= budget) return;
    directions(store, store.scores());
    ScorerPolicy::evict_head(layer, head, budget);
  }

  // The scores the eviction would read now, +inf for the protected rows.
  bool keep_priorities(const LayerRows& layer, int head, int budget, bool /*prompt_end*/,
                       std::vector<float>& out) const override {
    const HeadStore& store = layer.heads[size_t(head)];
    out.assign(size_t(store.n_slots()), 0.0f);
    directions(store, out.data());
    const Protection protect = protection(layer, budget);
    for (int s = 0; s < store.n_slots(); ++s) {
      if (store.live(s) && protect.covers(store.positions()[s]))
        out[size_t(s)] = std::numeric_limits<float>::infinity();
    }
    return true;
  }

 private:
  // Per live slot: -cos(key, mean of the live rows' unit keys). Two passes over the keys, so that
  // nothing the size of the head is allocated (heads may run at once on the cache's pool).
  static void directions(const HeadStore& store, float* out) {
    const auto dim = size_t(store.head_dim());
    thread_local std::vector<float> key;
    thread_local std::vector<double> mean;
    key.resize(dim);
    mean.assign(dim, 0.0);
    for (int s = 0; s < store.n_slots(); ++s) {
      if (!store.live(s)) continue;
      store.load_key(s, key.data());
      double norm = 0.0;
      for (size_t d = 0; d < dim; ++d) norm += double(key[d]) * key[d];
      const double inv = norm > 0.0 ? 1.0 / std::sqrt(norm) : 0.0;
      for (size_t d = 0; d < dim; ++d) mean[d] += double(key[d]) * inv;
    }
    double mean_norm = 0.0;
    for (const double m : mean) mean_norm += m * m;
    mean_norm = std::sqrt(mean_norm);
    for (int s = 0; s < store.n_slots(); ++s) {
      if (!store.live(s)) continue;
      store.load_key(s, key.data());
      double dot = 0.0, norm = 0.0;
      for (size_t d = 0; d < dim; ++d) {
        dot += double(key[d]) * mean[d];
        norm += double(key[d]) * key[d];
      }
      const double denom = std::sqrt(norm) * mean_norm;
      out[s] = denom > 0.0 ? -float(dot / denom) : 0.0f;
    }
  }
};

constexpr MethodInfo kMethods[] = {
    {"keydiff", "keydiff", "uniform", "KeyDiff: evict the rows whose keys point most like the mean key direction",
     "A cheap query-agnostic baseline that keeps distinctive keys, with no attention and no extra pass"},
};

}  // namespace

extern const PolicyInfo keydiff_policy_info = {
    "keydiff",
    "keep the rows whose keys differ most in direction from the mean key",
    {},
    kScorerReads,
    /*scores_rows=*/false,
    [](const ComponentParams& c) -> std::unique_ptr<TokenPolicy> { return std::make_unique<KeyDiffPolicy>(c); },
    nullptr,
    kMethods,
    /*keeps_every_row=*/false,
    /*holds_prompt_until_end=*/false,
    /*splits_heads=*/true};

}  // namespace squeezekv
