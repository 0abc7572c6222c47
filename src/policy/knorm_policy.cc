// Key-norm policy (KnormPress in kvpress; Devoto et al. 2024, "A Simple and Effective L2
// Norm-Based Strategy for KV Cache Compression", arXiv:2406.11430): keys with a low L2 norm draw
// high attention, so over budget the rows whose keys have the highest norm go first. Sinks and the
// recent window are protected as for the cumulative policy; ties go to the oldest row. The norm is
// taken from the f32 key given to the update (before fp16 storage), once per row, and needs no
// attention.
#include <cmath>

#include "policy/scorer_policy.h"
#include "squeezekv/core/component_info.h"

namespace squeezekv {
namespace {

// A scorer: it writes its scores only; the eviction is ScorerPolicy's.
class KnormPolicy final : public ScorerPolicy {
 public:
  explicit KnormPolicy(const ComponentParams& params) : ScorerPolicy(params) {}
  std::string_view name() const override { return "knorm"; }

  // A row's score is minus its key's norm, so evicting the lowest score evicts the largest norm.
  void score_keys(LayerRows& layer, const UpdateRows& update) override {
    const auto dim = size_t(layer.head_dim());
    for (size_t h = 0; h < layer.heads.size(); ++h) {
      float* scores = layer.heads[h].scores();
      const float* keys = update.keys + h * size_t(update.n_new) * dim;
      for (int t = 0; t < update.n_new; ++t) {
        const float* k = keys + size_t(t) * dim;
        double sum = 0.0;
        for (size_t d = 0; d < dim; ++d) sum += double(k[d]) * k[d];
        scores[update.slots[h][size_t(t)]] = -float(std::sqrt(sum));
      }
    }
  }
};

constexpr MethodInfo kMethods[] = {
    {"knorm", "knorm", "uniform", "KnormPress: evict the rows whose keys have the largest L2 norm",
     "Constant-memory eviction that needs neither attention nor a query"},
};

}  // namespace

extern const PolicyInfo knorm_policy_info = {
    "knorm",
    "keep the rows whose keys have the lowest L2 norm",
    {},
    kScorerReads,
    /*scores_rows=*/false,
    [](const ComponentParams& c) -> std::unique_ptr<TokenPolicy> { return std::make_unique<KnormPolicy>(c); },
    nullptr,
    kMethods,
    /*keeps_every_row=*/false,
    /*holds_prompt_until_end=*/false,
    /*splits_heads=*/true};

}  // namespace squeezekv
