#include "cache/sliding_window.h"

#include "policy/per_head_policy.h"

namespace squeezekv {
namespace {

class SlidingWindowRows final : public PerHeadPolicy {
 public:
  std::string_view name() const override { return "sliding"; }
  void evict_head(LayerRows& layer, int head, int window) override {
    // The next query (at tokens_seen) sees positions tokens_seen - window + 1 on: one more row
    // than it needs is kept, so that the window is exactly the newest `window` positions.
    const int64_t oldest = layer.tokens_seen - window;
    HeadStore& store = layer.heads[size_t(head)];
    for (int s = 0; s < store.n_slots(); ++s) {
      const int64_t p = store.positions()[s];
      if (p != HeadStore::kFree && p < oldest) store.evict(s);
    }
  }
};

}  // namespace

std::unique_ptr<TokenPolicy> make_sliding_window_rows() { return std::make_unique<SlidingWindowRows>(); }

}  // namespace squeezekv
