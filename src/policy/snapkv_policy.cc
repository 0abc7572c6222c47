// Observation-window policy (SnapKV, Li et al. 2024, arXiv:2404.14469): once, when the prompt ends,
// rows before the window are scored by the attention the last `window` prompt queries pay them,
// smoothed with a 1-D average pool of width `kernel` (zero padding, divided by the width), and the
// top budget - window of them are kept with the window itself and the sinks, per KV head.
// Key-proxy: the window's own keys are the queries (causal, self included).
// After the prompt (streams, docs/positions.md): the head stays at `budget` rows, the oldest
// non-sink rows evicted first, so the prompt's kept rows go before any generated one and a long
// generation ends as StreamingLLM's sinks + recent window. (Evicting only generated rows would
// freeze the cache on the prompt and drop every generated row but the newest.)
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>

#include "policy/eviction.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/core/component_info.h"
#include "squeezekv/policy/token_policy.h"

namespace squeezekv {
namespace {

class SnapKVPolicy final : public TokenPolicy {
 public:
  explicit SnapKVPolicy(const ComponentParams& params)
      : n_sink_(params.n_sink),
        window_(int(params.get_int("window"))),
        kernel_(int(params.get_int("kernel"))),
        source_(params.score) {}
  std::string_view name() const override { return "snapkv"; }
  bool bounded() const override { return done_; }  // the whole prompt is held until it ends
  bool wants_attention() const override { return source_ == ScoreSource::attention && !done_; }

  void score_attention(LayerRows& layer, int head, const float* probs, int n_queries, int n_slots) override {
    if (!wants_attention()) return;
    if (observed_.size() != layer.heads.size()) observed_.resize(layer.heads.size());
    auto& rows = observed_[size_t(head)];
    // Keep the probabilities of the latest `window` queries; slots do not move before the first
    // eviction, so they stay valid until finish_prompt.
    for (int q = std::max(0, n_queries - window_); q < n_queries; ++q) {
      const float* p = probs + size_t(q) * size_t(n_slots);
      rows.emplace_back(p, p + n_slots);
      if (int(rows.size()) > window_) rows.pop_front();
    }
  }

  void evict(LayerRows& layer, int budget) override {
    for (int h = 0; h < int(layer.heads.size()); ++h) evict_head(layer, h, budget);
  }

  // After the prompt: the oldest non-sink rows of this head alone past its budget (under a head
  // split, the count the split gave it at the prompt's end).
  void evict_head(LayerRows& layer, int head, int budget) override {
    if (done_) evict_lowest(layer.heads[size_t(head)], budget, Protection{n_sink_}, nullptr);
  }

  // At the prompt's end: the pooled observation-window scores of the rows before the window, the
  // window and the sinks +inf (what compress keeps regardless). After it: none (the decode rule
  // evicts by age, each head to its own count).
  bool keep_priorities(const LayerRows& layer, int h, int budget, bool prompt_end,
                       std::vector<float>& out) const override {
    if (done_ || !prompt_end) return false;
    const HeadStore& head = layer.heads[size_t(h)];
    const int window = std::max(1, std::min(window_, budget - n_sink_));
    out.assign(size_t(head.n_slots()), std::numeric_limits<float>::infinity());
    if (head.n_live() <= window) return true;  // the window alone: nothing to score
    const std::vector<float> score = observed_.size() == layer.heads.size() && !observed_[size_t(h)].empty()
                                         ? observed_sum(size_t(h), head.n_slots())
                                         : key_proxy_window(head, window);
    const Protection protect = prefix_scores(head, window, score, out);
    for (int s = 0; s < head.n_slots(); ++s) {
      if (head.live(s) && protect.covers(head.positions()[s])) out[size_t(s)] = std::numeric_limits<float>::infinity();
    }
    return true;
  }

  void finish_prompt(LayerRows& layer, int budget) override {
    done_ = true;
    // Sinks and window together must fit the layer's budget (allocators may give small ones).
    const int window = std::max(1, std::min(window_, budget - n_sink_));
    for (size_t h = 0; h < layer.heads.size(); ++h) {
      HeadStore& head = layer.heads[h];
      if (head.n_live() <= budget) continue;
      std::vector<float> score = observed_.size() == layer.heads.size() && !observed_[h].empty()
                                     ? observed_sum(h, head.n_slots())
                                     : key_proxy_window(head, window);
      compress(head, budget, window, score);
    }
    observed_.clear();
  }

  void reset() override {
    done_ = false;
    observed_.clear();
  }

  // Whether the prompt has ended, and the observation window's rows seen so far (a prompt saved
  // before its end).
  void save_state(StateWriter& out) const override {
    out.put(uint8_t(done_));
    out.put(uint64_t(observed_.size()));
    for (const auto& rows : observed_) {
      out.put(uint64_t(rows.size()));
      for (const auto& row : rows) out.put_vector(row);
    }
  }

  void load_state(StateReader& in, const LayerRows& layer) override {
    const bool done = in.get_bool("snapkv: prompt ended");
    std::vector<std::deque<std::vector<float>>> observed(in.get_count(8, layer.heads.size(), "snapkv: heads"));
    for (auto& rows : observed) {
      const size_t n = in.get_count(8, uint64_t(window_), "snapkv: observed rows");
      for (size_t i = 0; i < n; ++i) rows.push_back(in.get_vector<float>("snapkv: observed row"));
    }
    done_ = done;
    observed_ = std::move(observed);
  }

 private:
  std::vector<float> observed_sum(size_t h, int n_slots) const {
    std::vector<float> score(size_t(n_slots), 0.0f);
    for (const auto& row : observed_[h]) {
      for (size_t s = 0; s < row.size() && s < score.size(); ++s) score[s] += row[s];
    }
    return score;
  }

  // Attention of the window's keys (as queries) over the rows at or before them.
  static std::vector<float> key_proxy_window(const HeadStore& head, int window) {
    const int dim = head.head_dim();
    const int n_slots = head.n_slots();
    const std::vector<int> order = head.slots_by_position();
    const auto slots = static_cast<size_t>(n_slots);
    std::vector<float> score(slots, 0.0f), logits(slots), query(static_cast<size_t>(dim));
    std::vector<uint8_t> mask(slots);
    const float inv_sqrt_d = 1.0f / std::sqrt(float(dim));
    for (size_t w = order.size() - size_t(window); w < order.size(); ++w) {
      const int64_t query_pos = head.positions()[order[w]];
      head.load_key(order[w], query.data());
      for (int s = 0; s < n_slots; ++s) mask[size_t(s)] = head.live(s) && head.positions()[s] <= query_pos;
      head.key_probs(query.data(), 1, size_t(dim), size_t(n_slots), mask.data(), inv_sqrt_d, logits.data(),
                     size_t(n_slots));
      for (int s = 0; s < n_slots; ++s) score[size_t(s)] += logits[size_t(s)];
    }
    return score;
  }

  void compress(HeadStore& head, int budget, int window, const std::vector<float>& slot_score) {
    std::vector<float> by_slot;
    const Protection protect = prefix_scores(head, window, slot_score, by_slot);
    evict_slots(head, select_lowest(head, budget, protect, by_slot.data()));
  }

  // The pooled score of each row before the window into by_slot (slot-indexed, resized; 0 for
  // the others), and the rows kept regardless: the sinks and the window.
  Protection prefix_scores(const HeadStore& head, int window, const std::vector<float>& slot_score,
                           std::vector<float>& by_slot) const {
    const std::vector<int> order = head.slots_by_position();
    const size_t n_prefix = order.size() - size_t(window);  // rows before the window
    // Pool over the prefix in position order; the window and sinks are kept regardless.
    std::vector<float> pooled(n_prefix, 0.0f);
    const int half = kernel_ / 2;
    for (size_t i = 0; i < n_prefix; ++i) {
      float acc = 0.0f;
      for (int k = -half; k <= half; ++k) {
        const auto j = static_cast<int64_t>(i) + k;
        if (j >= 0 && j < static_cast<int64_t>(n_prefix)) acc += slot_score[size_t(order[size_t(j)])];
      }
      pooled[i] = acc / float(kernel_);
    }
    by_slot.assign(size_t(head.n_slots()), 0.0f);
    for (size_t i = 0; i < n_prefix; ++i) by_slot[size_t(order[i])] = pooled[i];
    return Protection{n_sink_, head.positions()[order[n_prefix]]};
  }

  int n_sink_;
  int window_;
  int kernel_;
  ScoreSource source_;
  bool done_ = false;
  std::vector<std::deque<std::vector<float>>> observed_;  // per head: the latest query rows
};

void require_odd(const ParamSpec& spec, const ParamValue& value) {
  if (const auto* v = std::get_if<int64_t>(&value)) require(*v % 2 == 1, spec.name, *v, "must be an odd number >= 1");
}

// Labelled where they differ from the default, so that a sweep of them (--windows, --kernels)
// gives one variant per value instead of collapsing them into one.
const ParamSpec kParams[] = {
    {"window",
     ParamKind::integer,
     "32",
     "snapkv: observation window (last prompt queries), < budget",
     1,
     double(1 << 30),
     false,
     {},
     {},
     true,
     false,
     nullptr,
     /*label=*/"window",
     /*omit_if=*/"32"},
    {"kernel",
     ParamKind::integer,
     "31",
     "snapkv: average-pool width (odd; 31 keeps whole 7-digit values where kvpress's 5 splits them, "
     "docs/results.md)",
     1,
     1023,
     false,
     {},
     {},
     true,
     false,
     require_odd,
     /*label=*/"kernel",
     /*omit_if=*/"31"},
};

constexpr std::string_view kSnapReads[] = {"n_sink", "score"};

constexpr MethodInfo kMethods[] = {
    {"adakv",
     "snapkv",
     "uniform",
     "Ada-KV over SnapKV (kvpress's AdaKVPress): the layer's best heads x budget rows by the observation "
     "window's scores, shared unevenly among its KV heads, each keeping at least head_floor of the budget",
     "Hard cap per layer where some heads need more rows than others (Feng et al. 2024, arXiv:2407.11550)",
     {},
     {},
     false,
     "adakv"},
    {"squeeze_snapkv", "snapkv", "squeeze",
     "SnapKV at prefill end with SqueezeAttention's per-layer budgets measured from the prompt",
     "Hard cap on tokens, evict at prefill only, with a data-driven depth-adaptive budget"},
    {"squeeze_adakv",
     "snapkv",
     "squeeze",
     "SnapKV with per-layer budgets (SqueezeAttention) and per-head shares (Ada-KV) of each layer's rows",
     "Hard cap on tokens, adaptive across layers and across heads",
     {},
     {},
     false,
     "adakv"},
};

}  // namespace

extern const PolicyInfo snapkv_policy_info = {
    "snapkv",
    "observation window, once at the end of the prompt",
    kParams,
    kSnapReads,
    /*scores_rows=*/true,
    [](const ComponentParams& c) -> std::unique_ptr<TokenPolicy> { return std::make_unique<SnapKVPolicy>(c); },
    [](const ComponentParams& c) {
      const int64_t window = c.get_int("window");
      require(window < c.budget, "window", window, "must be smaller than budget = " + std::to_string(c.budget));
    },
    kMethods,
    /*keeps_every_row=*/false,
    /*holds_prompt_until_end=*/true,
    /*splits_heads=*/true};

}  // namespace squeezekv
