// Position-only policies. streaming (StreamingLLM, Xiao et al. 2024, arXiv:2309.17453): the first
// n_sink tokens ever seen plus the most recent budget - n_sink. window: the most recent budget rows.
#include "policy/eviction.h"
#include "squeezekv/core/component_info.h"
#include "policy/per_head_policy.h"

namespace squeezekv {
namespace {

class StreamingPolicy final : public PerHeadPolicy {
 public:
  StreamingPolicy(int n_sink, bool sinks) : n_sink_(sinks ? n_sink : 0), sinks_(sinks) {}
  std::string_view name() const override { return sinks_ ? "streaming" : "window"; }
  void evict_head(LayerRows& layer, int head, int budget) override {
    evict_lowest(layer.heads[size_t(head)], budget, Protection{n_sink_}, nullptr);
  }

 private:
  int n_sink_;
  bool sinks_;
};

constexpr std::string_view kStreamingReads[] = {"n_sink"};

}  // namespace

extern const PolicyInfo streaming_policy_info = {"streaming",
                                                 "the first n_sink tokens ever seen and the most recent rows",
                                                 {},
                                                 kStreamingReads,
                                                 /*scores_rows=*/false,
                                                 [](const ComponentParams& c) -> std::unique_ptr<TokenPolicy> {
                                                   return std::make_unique<StreamingPolicy>(c.n_sink, true);
                                                 }};

extern const PolicyInfo window_policy_info = {"window",
                                              "the most recent rows",
                                              {},
                                              {},
                                              /*scores_rows=*/false,
                                              [](const ComponentParams& c) -> std::unique_ptr<TokenPolicy> {
                                                return std::make_unique<StreamingPolicy>(c.n_sink, false);
                                              }};

}  // namespace squeezekv
