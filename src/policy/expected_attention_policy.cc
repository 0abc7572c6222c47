// Expected attention (Devoto et al. 2025, arXiv:2510.00636; kvpress's ExpectedAttentionPress): a
// row matters as much as the attention the coming queries are expected to pay it. The prompt's
// queries (before RoPE, the sinks' left out) give each query head a mean mu and a covariance S;
// RoPE is averaged over the next `ea_future` positions (per rotated pair, the mean of cos and sin,
// a scaled rotation R), so the coming query is Gaussian with mean R mu and covariance R S R^T.
// A row with key k (as stored, turned to its position) then expects the weight
// softmax over the rows of  scale (R mu) . k + scale^2 k^T R S R^T k / 2  (the Gaussian's
// moment), averaged over the KV head's query heads and multiplied by the row's value norm.
//
// It chooses once, when the prompt ends (holding the prompt until then): the sinks and the recent
// window are protected as for every scorer, the lowest scores go. After the prompt a new row is
// scored against the same statistics and the same softmax normalisers, so the eviction carries on
// by one rule. No attention, no extra pass: one d x d covariance per query head.
#include <cmath>
#include <limits>
#include <vector>

#include "policy/scorer_policy.h"
#include "squeezekv/core/component_info.h"
#include "squeezekv/core/state_stream.h"

namespace squeezekv {
namespace {

constexpr std::string_view kSwitch[] = {"on", "off"};

class ExpectedAttentionPolicy final : public ScorerPolicy {
 public:
  explicit ExpectedAttentionPolicy(const ComponentParams& params)
      : ScorerPolicy(params),
        n_sink_(params.n_sink),
        future_(int(params.get_int("ea_future"))),
        covariance_(params.get_text("ea_covariance") == "on") {}
  std::string_view name() const override { return "expected_attention"; }
  bool bounded() const override { return done_; }  // the prompt is held until its statistics are in
  bool wants_queries() const override { return !done_; }

  void add_queries(LayerRows& /*layer*/, const UpdateQueries& q) override {
    const auto d = size_t(q.ld / size_t(q.n_heads));
    if (sum_.empty()) {
      head_dim_ = d;
      n_heads_ = q.n_heads;
      rope_ = q;
      sum_.assign(size_t(q.n_heads) * d, 0.0);
      if (covariance_) second_.assign(size_t(q.n_heads) * d * d, 0.0);
    }
    for (int t = 0; t < q.n; ++t) {
      if (q.first_pos + t < n_sink_) continue;  // the sinks' queries are outliers (kvpress drops them too)
      ++count_;
      for (int h = 0; h < q.n_heads; ++h) {
        const float* x = q.q + size_t(t) * q.ld + size_t(h) * d;
        double* s = sum_.data() + size_t(h) * d;
        for (size_t i = 0; i < d; ++i) s[i] += x[i];
        if (!covariance_) continue;
        double* m = second_.data() + size_t(h) * d * d;
        for (size_t i = 0; i < d; ++i) {
          for (size_t j = 0; j < d; ++j) m[i * d + j] += double(x[i]) * x[j];
        }
      }
    }
  }

  void score_keys(LayerRows& layer, const UpdateRows& update) override {
    for (size_t h = 0; h < layer.heads.size(); ++h) {
      if (!done_) {  // the prompt's rows are scored together when it ends
        for (const int slot : update.slots[h]) layer.heads[h].scores()[slot] = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      HeadStore& store = layer.heads[h];
      for (const int slot : update.slots[h])
        store.scores()[slot] = expected(store, int(h % size_t(layer.n_kv_heads)), slot);
    }
  }

  // The prompt's rows wait unscored (NaN) until it ends, when they are scored together: only
  // scored rows go, the lowest first, sinks and the recent window protected.
  void evict_head(LayerRows& layer, int head, int budget) override {
    evict_lowest_scored(layer.heads[size_t(head)], budget, protection(layer, budget));
  }

  void finish_prompt(LayerRows& layer, int budget) override {
    done_ = true;
    if (count_ > 0) {
      model(layer);
      for (size_t h = 0; h < layer.heads.size(); ++h) normalise(layer.heads[h], int(h % size_t(layer.n_kv_heads)));
    } else {  // no query came (a cache fed without an engine): every row alike, the oldest go first
      for (HeadStore& store : layer.heads) {
        for (int s = 0; s < store.n_slots(); ++s) store.scores()[s] = 0.0f;
      }
    }
    evict(layer, budget);
  }

  // The prompt's query statistics (before its end) or the model of the coming queries (after).
  void save_state(StateWriter& out) const override {
    out.put(uint8_t(done_));
    out.put(count_);
    out.put(uint64_t(head_dim_));
    out.put(int32_t(n_heads_));
    out.put(uint64_t(groups_));
    out.put(int32_t(rope_.style == RopeStyle::neox ? 1 : 0));
    out.put(int32_t(rope_.n_rot));
    out.put(rope_.rope_base);
    out.put(rope_.scale);
    out.put_vector(sum_);
    out.put_vector(second_);
    out.put_vector(mean_);
    out.put_vector(cov_);
    out.put_vector(log_norm_);
  }

  void load_state(StateReader& in, const LayerRows& layer) override {
    const bool done = in.get_bool("expected_attention: prompt ended");
    const auto count = in.get<int64_t>("expected_attention: queries");
    const auto d = in.get<uint64_t>("expected_attention: head_dim");
    const auto heads = in.get<int32_t>("expected_attention: query heads");
    const auto groups = in.get<uint64_t>("expected_attention: group");
    const auto neox = in.get<int32_t>("expected_attention: rope style");
    const auto n_rot = in.get<int32_t>("expected_attention: n_rot");
    const auto base = in.get<float>("expected_attention: rope base");
    const auto scale = in.get<float>("expected_attention: scale");
    const bool empty = count == 0 && d == 0 && heads == 0;
    check_state(empty || (d == uint64_t(layer.head_dim()) && heads >= 1 && heads <= 4096 && count >= 0 && groups >= 1 &&
                          groups <= uint64_t(heads) && (neox == 0 || neox == 1) && n_rot >= 0 && uint64_t(n_rot) <= d &&
                          std::isfinite(base) && std::isfinite(scale)),
                "expected_attention", "statistics that do not fit the layer");
    const uint64_t per_head = uint64_t(heads) * d;
    std::vector<double> sum = in.get_vector<double>("expected_attention: sums", per_head);
    std::vector<double> second = in.get_vector<double>("expected_attention: second moments", per_head * d);
    std::vector<float> mean = in.get_vector<float>("expected_attention: means", per_head);
    std::vector<float> cov = in.get_vector<float>("expected_attention: covariances", per_head * d);
    std::vector<double> log_norm = in.get_vector<double>("expected_attention: normalisers", uint64_t(heads));
    check_state((sum.empty() || sum.size() == per_head) && (mean.empty() || mean.size() == per_head) &&
                    (second.empty() || second.size() == per_head * d) && (cov.empty() || cov.size() == per_head * d),
                "expected_attention", "statistics of another shape");
    done_ = done;
    count_ = count;
    head_dim_ = size_t(d);
    n_heads_ = heads;
    groups_ = size_t(std::max<uint64_t>(1, groups));
    rope_.style = neox == 1 ? RopeStyle::neox : RopeStyle::normal;
    rope_.n_rot = n_rot;
    rope_.rope_base = base;
    rope_.scale = scale;
    sum_ = std::move(sum);
    second_ = std::move(second);
    mean_ = std::move(mean);
    cov_ = std::move(cov);
    log_norm_ = std::move(log_norm);
  }

  void reset() override {
    done_ = false;
    count_ = 0;
    sum_.clear();
    second_.clear();
    mean_.clear();
    cov_.clear();
    log_norm_.clear();
  }

 private:
  // mu and S per query head, turned by the mean RoPE over the coming positions.
  void model(const LayerRows& layer) {
    const size_t d = head_dim_;
    const auto heads = size_t(n_heads_);
    const auto n = double(count_);
    groups_ = size_t(std::max(1, n_heads_ / layer.n_kv_heads));
    // The mean rotation per rotated pair (i, i + n_rot/2) for neox, (2i, 2i + 1) otherwise.
    const int64_t from = layer.tokens_seen;
    const auto pairs = size_t(rope_.n_rot / 2);
    std::vector<double> c(pairs, 0.0), s(pairs, 0.0);
    for (size_t i = 0; i < pairs; ++i) {
      const double theta = std::pow(double(rope_.rope_base), -2.0 * double(i) / double(rope_.n_rot));
      for (int t = 0; t < future_; ++t) {
        const double angle = double(from + t) * theta;
        c[i] += std::cos(angle);
        s[i] += std::sin(angle);
      }
      c[i] /= future_;
      s[i] /= future_;
    }
    const bool neox = rope_.style == RopeStyle::neox;
    auto pair_of = [&](size_t i) -> std::pair<size_t, size_t> {
      return neox ? std::pair{i, i + pairs} : std::pair{2 * i, 2 * i + 1};
    };
    // R as a dense d x d matrix (identity past n_rot): small, and S needs R S R^T.
    std::vector<double> r(d * d, 0.0);
    for (size_t i = 0; i < d; ++i) r[i * d + i] = 1.0;
    for (size_t i = 0; i < pairs; ++i) {
      const auto [a, b] = pair_of(i);
      r[a * d + a] = c[i];
      r[a * d + b] = -s[i];
      r[b * d + a] = s[i];
      r[b * d + b] = c[i];
    }
    mean_.assign(heads * d, 0.0f);
    if (covariance_) cov_.assign(heads * d * d, 0.0f);
    std::vector<double> mu(d), sigma(d * d), tmp(d * d);
    for (size_t h = 0; h < heads; ++h) {
      for (size_t i = 0; i < d; ++i) mu[i] = sum_[h * d + i] / n;
      for (size_t i = 0; i < d; ++i) {
        double v = 0.0;
        for (size_t j = 0; j < d; ++j) v += r[i * d + j] * mu[j];
        mean_[h * d + i] = float(v);
      }
      if (!covariance_) continue;
      const double* m = second_.data() + h * d * d;
      for (size_t i = 0; i < d; ++i) {
        for (size_t j = 0; j < d; ++j) sigma[i * d + j] = m[i * d + j] / n - mu[i] * mu[j];
      }
      for (size_t i = 0; i < d; ++i) {  // tmp = R sigma
        for (size_t j = 0; j < d; ++j) {
          double v = 0.0;
          for (size_t k = 0; k < d; ++k) v += r[i * d + k] * sigma[k * d + j];
          tmp[i * d + j] = v;
        }
      }
      for (size_t i = 0; i < d; ++i) {  // cov = tmp R^T
        for (size_t j = 0; j < d; ++j) {
          double v = 0.0;
          for (size_t k = 0; k < d; ++k) v += tmp[i * d + k] * r[j * d + k];
          cov_[(h * d + i) * d + j] = float(v);
        }
      }
    }
    second_.clear();  // the statistics are final: the prompt has ended
  }

  // Query head h's expected logit for a key.
  double logit(size_t h, const float* k) const {
    const size_t d = head_dim_;
    const double scale = rope_.scale;
    double dot = 0.0;
    for (size_t i = 0; i < d; ++i) dot += double(mean_[h * d + i]) * k[i];
    double quad = 0.0;
    if (covariance_) {
      const float* cov = cov_.data() + h * d * d;
      for (size_t i = 0; i < d; ++i) {
        double row = 0.0;
        for (size_t j = 0; j < d; ++j) row += double(cov[i * d + j]) * k[j];
        quad += row * k[i];
      }
    }
    return scale * dot + scale * scale * quad / 2.0;
  }

  // Every live row's score over the head's rows: the softmax per query head, its normaliser kept.
  void normalise(HeadStore& store, int g) {
    const size_t d = head_dim_;
    std::vector<float> key(d), value(d);
    const auto n_slots = size_t(store.n_slots());
    const size_t first = size_t(g) * groups_;
    std::vector<double> logits(groups_ * n_slots, -std::numeric_limits<double>::infinity());
    std::vector<double> norms(n_slots, 0.0);
    for (int s = 0; s < store.n_slots(); ++s) {
      if (!store.live(s)) continue;
      store.load_key(s, key.data());
      store.load_value(s, value.data());
      double v = 0.0;
      for (size_t i = 0; i < d; ++i) v += double(value[i]) * value[i];
      norms[size_t(s)] = std::sqrt(v);
      for (size_t i = 0; i < groups_; ++i) logits[i * n_slots + size_t(s)] = logit(first + i, key.data());
    }
    if (log_norm_.size() < size_t(n_heads_)) log_norm_.assign(size_t(n_heads_), 0.0);
    for (size_t i = 0; i < groups_; ++i) {
      double most = -std::numeric_limits<double>::infinity(), sum = 0.0;
      for (size_t s = 0; s < n_slots; ++s) most = std::max(most, logits[i * n_slots + s]);
      for (size_t s = 0; s < n_slots; ++s) sum += std::exp(logits[i * n_slots + s] - most);
      log_norm_[first + i] = most + std::log(sum);
    }
    for (int s = 0; s < store.n_slots(); ++s) {
      if (!store.live(s)) continue;
      double p = 0.0;
      for (size_t i = 0; i < groups_; ++i) p += std::exp(logits[i * n_slots + size_t(s)] - log_norm_[first + i]);
      store.scores()[s] = float(p / double(groups_) * norms[size_t(s)]);
    }
  }

  // A row stored after the prompt, against the prompt's statistics and normalisers.
  float expected(const HeadStore& store, int g, int slot) const {
    if (mean_.empty()) return 0.0f;  // no statistics (a prompt of sinks alone): every row alike
    const size_t d = head_dim_;
    key_.resize(d);
    value_.resize(d);
    store.load_key(slot, key_.data());
    store.load_value(slot, value_.data());
    double v = 0.0;
    for (size_t i = 0; i < d; ++i) v += double(value_[i]) * value_[i];
    const size_t first = size_t(g) * groups_;
    double p = 0.0;
    for (size_t i = 0; i < groups_; ++i) p += std::exp(logit(first + i, key_.data()) - log_norm_[first + i]);
    return float(p / double(groups_) * std::sqrt(v));
  }

  int64_t n_sink_;
  int future_;
  bool covariance_;
  bool done_ = false;
  int64_t count_ = 0;
  size_t head_dim_ = 0;
  int n_heads_ = 0;
  size_t groups_ = 1;  // query heads per KV head
  UpdateQueries rope_{};
  std::vector<double> sum_, second_;        // per query head: sum of q, sum of q q^T (covariance on)
  std::vector<float> mean_, cov_;           // per query head: R mu, R S R^T (after the prompt)
  std::vector<double> log_norm_;            // per query head: log of its softmax's normaliser
  mutable std::vector<float> key_, value_;  // expected()'s scratch (score_keys runs on one thread)
};

const ParamSpec kParams[] = {
    {"ea_future",
     ParamKind::integer,
     "512",
     "expected_attention: coming positions the queries' RoPE is averaged over",
     1,
     double(1 << 20),
     false,
     {},
     {},
     true,
     false,
     nullptr,
     /*label=*/"future",
     /*omit_if=*/"512"},
    {"ea_covariance",
     ParamKind::choice,
     "on",
     "expected_attention: model the queries' covariance (on) or their mean alone (off)",
     0,
     0,
     false,
     kSwitch,
     {},
     true,
     false,
     nullptr,
     /*label=*/"cov",
     /*omit_if=*/"on"},
};

constexpr MethodInfo kMethods[] = {
    {"expected_attention", "expected_attention", "uniform",
     "Expected attention: keep the rows the prompt's query statistics expect the coming queries to attend",
     "A query-agnostic baseline that needs no extra pass: one compression when the prompt ends"},
};

}  // namespace

extern const PolicyInfo expected_attention_policy_info = {
    "expected_attention",
    "keep the rows the coming queries are expected to attend (query statistics, RoPE averaged ahead)",
    kParams,
    kScorerReads,
    /*scores_rows=*/false,
    [](const ComponentParams& c) -> std::unique_ptr<TokenPolicy> {
      return std::make_unique<ExpectedAttentionPolicy>(c);
    },
    nullptr,
    kMethods,
    /*keeps_every_row=*/false,
    /*holds_prompt_until_end=*/true,
    /*splits_heads=*/false};

}  // namespace squeezekv
