// Position-only policies. streaming (StreamingLLM, Xiao et al. 2024, arXiv:2309.17453): the first
// n_sink tokens ever seen plus the most recent budget - n_sink. window: the most recent budget rows.
#include "policy/eviction.h"
#include "policy/policies.h"

namespace squeezekv {
namespace {

class StreamingPolicy final : public TokenPolicy {
 public:
  StreamingPolicy(int n_sink, bool sinks) : n_sink_(sinks ? n_sink : 0), sinks_(sinks) {}
  std::string_view name() const override { return sinks_ ? "streaming" : "window"; }
  void evict(LayerRows& layer, int budget) override {
    for (HeadStore& head : layer.heads) {
      evict_lowest(head, budget, Protection{n_sink_}, nullptr);
    }
  }

 private:
  int n_sink_;
  bool sinks_;
};

}  // namespace

std::unique_ptr<TokenPolicy> make_streaming_policy(const KVCacheConfig& config, bool sinks) {
  return std::make_unique<StreamingPolicy>(config.n_sink, sinks);
}

}  // namespace squeezekv
