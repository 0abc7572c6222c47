// Current-step attention policy (TOVA, Oren et al. 2024, arXiv:2401.06104): at each update, rows are
// scored by the attention of the newest query alone, averaged over every head of the layer, and the
// lowest-scoring rows are evicted — one selection shared by all KV heads of a batch item.
// Key-proxy: the newest key is the query (over every row, itself included). Sinks are kept.
#include <algorithm>
#include <cmath>

#include "policy/eviction.h"
#include "squeezekv/core/component_info.h"
#include "squeezekv/policy/token_policy.h"

namespace squeezekv {
namespace {

class TovaPolicy final : public TokenPolicy {
 public:
  explicit TovaPolicy(const ComponentParams& params) : n_sink_(params.n_sink), source_(params.score) {}
  std::string_view name() const override { return "tova"; }
  bool wants_attention() const override { return source_ == ScoreSource::attention; }

  void score_keys(LayerRows& layer, const UpdateRows& update) override {
    const int n_slots = layer.heads.front().n_slots();
    shared_.assign(size_t(layer.n_batch) * size_t(n_slots), 0.0f);
    n_slots_ = n_slots;
    if (source_ != ScoreSource::key_proxy) return;
    const int dim = layer.head_dim();
    const float inv_sqrt_d = 1.0f / std::sqrt(float(dim));
    logits_.resize(size_t(n_slots));
    mask_.resize(size_t(n_slots));
    for (size_t h = 0; h < layer.heads.size(); ++h) {
      const HeadStore& head = layer.heads[h];
      const float* newest = update.keys + (h * size_t(update.n_new) + size_t(update.n_new - 1)) * size_t(dim);
      for (int s = 0; s < n_slots; ++s) mask_[size_t(s)] = head.live(s);
      head.key_probs(newest, 1, size_t(dim), size_t(n_slots), mask_.data(), inv_sqrt_d, logits_.data(),
                     size_t(n_slots));
      add_to_batch(layer.batch_of(int(h)), logits_.data(), layer.n_kv_heads);
    }
  }

  void score_attention(LayerRows& layer, int head, const float* probs, int n_queries, int n_slots) override {
    if (source_ != ScoreSource::attention || n_queries == 0 || n_slots != n_slots_) return;
    add_to_batch(layer.batch_of(head), probs + size_t(n_queries - 1) * size_t(n_slots), layer.n_kv_heads);
  }

  void evict(LayerRows& layer, int budget) override {
    for (int b = 0; b < layer.n_batch; ++b) {
      HeadStore& first = layer.heads[size_t(b * layer.n_kv_heads)];
      const float* scores = first.n_slots() == n_slots_ ? shared_.data() + size_t(b) * size_t(n_slots_) : nullptr;
      select_lowest_into(first, budget, Protection{n_sink_}, scores, candidates_, chosen_);
      // Every head of the batch item appended and evicted alike, so slots match across heads.
      for (int h = 0; h < layer.n_kv_heads; ++h) {
        evict_slots(layer.heads[size_t(b * layer.n_kv_heads + h)], chosen_);
      }
    }
  }

  // The last update's head-averaged attention: an eviction between updates (a budget set) reads it.
  void save_state(StateWriter& out) const override {
    out.put(int32_t(n_slots_));
    out.put_vector(shared_);
  }

  void load_state(StateReader& in, const LayerRows& layer) override {
    const auto n_slots = in.get<int32_t>("tova: slots");
    std::vector<float> shared = in.get_vector<float>("tova: attention");
    check_state(n_slots >= 0 && shared.size() == size_t(layer.n_batch) * size_t(n_slots), "tova",
                "attention rows differ from the slots");
    n_slots_ = n_slots;
    shared_ = std::move(shared);
  }

 private:
  void add_to_batch(int batch, const float* probs, int n_heads) {
    float* shared = shared_.data() + size_t(batch) * size_t(n_slots_);
    for (int s = 0; s < n_slots_; ++s) shared[s] += probs[s] / float(n_heads);
  }

  int n_sink_;
  ScoreSource source_;
  int n_slots_ = 0;
  std::vector<float> shared_;  // [n_batch, n_slots]: this update's head-averaged attention
  std::vector<float> logits_;
  std::vector<uint8_t> mask_;
  std::vector<int> candidates_, chosen_;  // eviction scratch, reused every step
};

constexpr std::string_view kTovaReads[] = {"n_sink", "score"};

}  // namespace

extern const PolicyInfo tova_policy_info = {
    "tova",
    "the newest query's attention, one choice per layer",
    {},
    kTovaReads,
    /*scores_rows=*/true,
    [](const ComponentParams& c) -> std::unique_ptr<TokenPolicy> { return std::make_unique<TovaPolicy>(c); }};

}  // namespace squeezekv
