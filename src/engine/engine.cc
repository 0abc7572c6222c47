#include "squeezekv/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/finite_check.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv {

Engine::Engine(const Model& model, ThreadPool* pool) : model_(model), pool_(pool) {
  scratch_.resize(pool ? pool->num_workers() : 1);
  head_rank0_.resize(size_t(model.config().n_kv_heads));
  rotated_.resize(size_t(model.config().n_kv_heads));
}

void Engine::ensure_rank_table(int64_t rows) {
  if (rows <= rank_rows_) return;
  // Doubling: the table stops growing once the cache holds its budget (ranks stay below it).
  const int64_t grown = std::max(rows, 2 * rank_rows_);
  const auto n_rot = size_t(model_.config().n_rot);
  const bool neox = model_.config().rope_style == RopeStyle::neox;
  rank_rope_.resize(size_t(grown) * n_rot);
  turns_.resize(size_t(grown) * 2 * n_rot);
  for (int64_t r = rank_rows_; r < grown; ++r) {
    float* cs = rank_rope_.data() + size_t(r) * n_rot;
    rope_cache(r, int64_t(n_rot), model_.config().rope_base, cs);
    rope_turn_row(cs, n_rot, neox, turns_.data() + size_t(r) * 2 * n_rot);
  }
  rank_rows_ = grown;
}

void Engine::rotate_keys(const LayerCache& layer, size_t ld_rows) {
  const ModelConfig& c = model_.config();
  const auto hd = size_t(c.head_dim);
  const size_t need = size_t(c.n_kv_heads) * ld_rows * hd;
  if (rot_keys_.size() < need) rot_keys_.resize(need);
  auto rotate = [&](size_t g, size_t) {
    const HeadStore& head = layer.head(int(g));
    rotated_[g] = head.max_shift() > 0;
    if (!rotated_[g] || kv_quantized(head.key_type()) || kv_kivi(head.key_type())) return;  // fused in attention
    // R(rank at insertion - shift) k = R(-shift) applied to the stored key.
    rotate_rows_back(head.keys(), head.key_type(), head.shifts(), size_t(head.n_slots()), hd, size_t(c.n_rot),
                     c.rope_style == RopeStyle::neox, turns_.data(), rot_keys_.data() + g * ld_rows * hd);
  };
  const int64_t work = int64_t(c.n_kv_heads) * int64_t(ld_rows) * c.head_dim;
  if (pool_ && c.n_kv_heads > 1 && work >= kMatmulParallelMacs) {
    pool_->parallel_for(size_t(c.n_kv_heads), rotate);
  } else {
    for (size_t g = 0; g < size_t(c.n_kv_heads); ++g) rotate(g, 0);
  }
}

std::unique_ptr<ModelCache> Engine::make_cache(KVCacheConfig config) const {
  config.head_dim = model_.config().head_dim;
  if (config.max_distance == 0) config.max_distance = std::max<int64_t>(model_.config().context_length - 1, 0);
  return std::make_unique<ModelCache>(config, model_.config().n_layers, model_.config().n_kv_heads);
}

void Engine::begin_prompt(ModelCache& cache) {
  cache.begin_prompt();
}

void Engine::end_prompt(ModelCache& cache) {
  cache.end_prompt();
}

void Engine::reserve(int n) {
  if (n <= capacity_) return;
  const ModelConfig& c = model_.config();
  const auto rows = size_t(n);
  const size_t q_dim = size_t(c.n_heads) * size_t(c.head_dim);
  const size_t kv_dim = size_t(c.n_kv_heads) * size_t(c.head_dim);
  x_.resize(rows * size_t(c.dim));
  xb_.resize(rows * size_t(c.dim));
  before_.resize(rows * size_t(c.dim));
  proj_.resize(rows * size_t(c.dim));
  q_.resize(rows * q_dim);
  att_.resize(rows * q_dim);
  k_.resize(rows * kv_dim);
  v_.resize(rows * kv_dim);
  k_heads_.resize(rows * kv_dim);
  v_heads_.resize(rows * kv_dim);
  gate_.resize(rows * size_t(c.ffn_dim));
  up_.resize(rows * size_t(c.ffn_dim));
  rope_.resize(rows * size_t(c.n_rot));
  capacity_ = n;
}

namespace {

void add_bias(float* x, const std::vector<float>& bias, int n_rows) {
  if (bias.empty()) return;
  for (int t = 0; t < n_rows; ++t) add_inplace(x + size_t(t) * bias.size(), bias.data(), int64_t(bias.size()));
}

void rms_rows(const float* x, const std::vector<float>& weight, int n, float eps, float* out) {
  const auto dim = int64_t(weight.size());
  for (int t = 0; t < n; ++t) rms_norm(x + size_t(t) * size_t(dim), weight.data(), dim, eps, out + size_t(t) * size_t(dim));
}

// A span-rule update of n tokens from pos0 whose queries would precede the clamped position:
// more than clamp + 1 tokens once any row is clamped (docs/positions.md).
bool needs_pieces(int64_t clamp, int64_t pos0, int64_t n) {
  return clamp > 0 && n > clamp + 1 && pos0 + n - 1 >= clamp;
}

}  // namespace

void Engine::check_cache(const ModelCache& cache) const {
  const ModelConfig& c = model_.config();
  // Messages are built only on failure: no allocation per token.
  if (cache.n_layers() != c.n_layers) {
    require(false, "cache layers", cache.n_layers(), "the model has " + std::to_string(c.n_layers) + " layers");
  }
  if (cache.layer(0).n_heads() != c.n_kv_heads) {
    require(false, "cache KV heads", cache.layer(0).n_heads(),
            "the model has " + std::to_string(c.n_kv_heads) + " KV heads");
  }
  if (cache.config().head_dim != c.head_dim) {
    require(false, "cache head_dim", cache.config().head_dim,
            "the model's head dimension is " + std::to_string(c.head_dim));
  }
}

void Engine::forward(std::span<const int32_t> tokens, ModelCache& cache, Logits mode,
                     std::vector<float>& logits) {
  check_cache(cache);
  // Clamped distances: every query of an update must be at least as far on as the clamped
  // position it places old rows at, so an update spans at most max_distance + 1 tokens.
  const int64_t clamp = span_distance(cache);
  const int64_t pos0 = cache.layer(0).tokens_seen();
  const auto n = int64_t(tokens.size());
  if (needs_pieces(clamp, pos0, n)) {
    forward_in_pieces(tokens, cache, mode, logits, int(clamp + 1));
    return;
  }
  const SequenceStep step{tokens, &cache, mode, &logits};
  forward_batch(std::span(&step, 1));
}

void Engine::forward_batch(std::span<const SequenceStep> steps) {
  const ModelConfig& c = model_.config();
  require(!steps.empty(), "steps", 0, "forward_batch needs at least one sequence");
  int n = 0;  // rows of every sequence together
  int logit_rows = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    const SequenceStep& step = steps[s];
    require(step.cache != nullptr, "cache", "null", "every sequence needs its cache");
    require(!step.tokens.empty(), "tokens", 0, "forward needs at least one token");
    require(step.mode == Logits::none || step.logits != nullptr, "logits", "null",
            "a sequence that asks for logits needs somewhere to put them");
    check_cache(*step.cache);
    const int64_t clamp = span_distance(*step.cache);
    const auto n_step = int64_t(step.tokens.size());
    if (needs_pieces(clamp, step.cache->layer(0).tokens_seen(), n_step)) {
      require(false, "tokens", n_step,
              "more than max_distance + 1 = " + std::to_string(clamp + 1) +
                  " tokens in one update of a span-rule cache (forward() splits them; split them)");
    }
    for (size_t o = 0; o < s; ++o) {
      require(steps[o].cache != step.cache, "cache", s, "two sequences of one batch share a cache");
    }
    n += int(step.tokens.size());
    logit_rows += step.mode == Logits::all ? int(step.tokens.size()) : step.mode == Logits::last ? 1 : 0;
  }
  reserve(n);
  const auto dim = size_t(c.dim);
  const size_t q_dim = size_t(c.n_heads) * size_t(c.head_dim);
  const size_t kv_dim = size_t(c.n_kv_heads) * size_t(c.head_dim);
  const auto hd = size_t(c.head_dim);

  std::vector<SeqSpan>& spans = spans_;
  spans.clear();
  int row = 0;
  for (const SequenceStep& step : steps) {
    ModelCache& cache = *step.cache;
    const int n_s = int(step.tokens.size());
    const int64_t pos0 = cache.layer(0).tokens_seen();
    // An allocator that reads the residual stream measures the cache's first update (as one that
    // reads keys does), so the prompt is held whole for one prefill chunk at most.
    const BudgetCoordinator* coordinator = cache.coordinator();
    const bool measure = coordinator && coordinator->allocator().source() == MeasureSource::residual &&
                         !coordinator->is_final() && !coordinator->reported(0);
    spans.push_back({row, n_s, pos0, measure, span_distance(cache)});
    for (int t = 0; t < n_s; ++t) {
      model_.embed(step.tokens[size_t(t)], x_.data() + size_t(row + t) * dim);
      rope_cache(pos0 + t, c.n_rot, c.rope_base, rope_.data() + size_t(row + t) * size_t(c.n_rot));
    }
    row += n_s;
  }
  bool any_measure = false;
  for (const SeqSpan& sp : spans) any_measure = any_measure || sp.measure;

  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = model_.layer(l);
    if (observer_ || any_measure) std::copy(x_.begin(), x_.begin() + long(size_t(n) * dim), before_.begin());
    rms_rows(x_.data(), w.attn_norm, n, c.norm_eps, xb_.data());
    // q, k and v in one parallel region: one hand-off instead of three.
    const MatmulOutput qkv[3] = {{&w.wq, q_.data()}, {&w.wk, k_.data()}, {&w.wv, v_.data()}};
    matmul_many(qkv, xb_.data(), n, pool_);
    add_bias(q_.data(), w.bq, n);
    add_bias(k_.data(), w.bk, n);
    add_bias(v_.data(), w.bv, n);
    for (size_t s = 0; s < steps.size(); ++s) {
      const SeqSpan& sp = spans[s];
      ModelCache& cache = *steps[s].cache;
      LayerCache& layer = cache.layer(l);
      // Ranks replace text positions once the layer has evicted (before, the two are equal).
      bool ranks = false;
      if (cache.config().positions == PositionRule::cache) {
        int64_t most = 0;
        for (int h = 0; h < c.n_kv_heads; ++h) {
          head_rank0_[size_t(h)] = layer.head(h).n_live();
          ranks = ranks || head_rank0_[size_t(h)] < sp.pos0;
          most = std::max(most, head_rank0_[size_t(h)]);
        }
        if (ranks) ensure_rank_table(most + sp.n);
      }
      const int group = c.group();
      for (int t = 0; t < sp.n; ++t) {
        const size_t r = size_t(sp.row0 + t);
        const float* cs = rope_.data() + r * size_t(c.n_rot);
        for (int h = 0; h < c.n_heads; ++h) {
          const float* rot = ranks ? rank_cos_sin(head_rank0_[size_t(h / group)] + t) : cs;
          rope_apply(q_.data() + r * q_dim + size_t(h) * hd, c.n_rot, c.rope_style, rot);
        }
        for (int h = 0; h < c.n_kv_heads; ++h) {
          const float* rot = ranks ? rank_cos_sin(head_rank0_[size_t(h)] + t) : cs;
          rope_apply(k_.data() + r * kv_dim + size_t(h) * hd, c.n_rot, c.rope_style, rot);
        }
      }
      // The cache takes [kv_heads, n, hd].
      for (int t = 0; t < sp.n; ++t) {
        for (int h = 0; h < c.n_kv_heads; ++h) {
          const size_t src = size_t(sp.row0 + t) * kv_dim + size_t(h) * hd;
          const size_t dst = (size_t(h) * size_t(sp.n) + size_t(t)) * hd;
          std::memcpy(k_heads_.data() + dst, k_.data() + src, hd * sizeof(float));
          std::memcpy(v_heads_.data() + dst, v_.data() + src, hd * sizeof(float));
        }
      }
      layer.begin_update(k_heads_.data(), v_heads_.data(), sp.n, pool_);
      // Rows farther than the clamp from the update's last query turn to position 0 once; the
      // attention places them at that query's position minus the clamp.
      const int64_t clamped_at = sp.clamp > 0 ? sp.pos0 + sp.n - 1 - sp.clamp : -1;
      if (clamped_at >= 0) layer.rotate_keys_to_origin(clamped_at, c.n_rot, c.rope_style, c.rope_base);
      attention(layer, sp.row0, sp.n, sp.pos0, ranks, clamped_at);
      layer.end_update(pool_);
    }
    matmul(w.wo, att_.data(), n, proj_.data(), pool_);
    add_inplace(x_.data(), proj_.data(), int64_t(size_t(n) * dim));
    for (size_t s = 0; s < steps.size(); ++s) {
      const SeqSpan& sp = spans[s];
      const float* before = before_.data() + size_t(sp.row0) * dim;
      const float* after = x_.data() + size_t(sp.row0) * dim;
      if (observer_) observer_(l, before, after, sp.n, c.dim);
      if (sp.measure) {  // the last layer's report publishes the schedule
        BudgetCoordinator* coordinator = steps[s].cache->coordinator();
        coordinator->report(l, coordinator->allocator().measure_residual(before, after, sp.n, c.dim));
      }
    }

    rms_rows(x_.data(), w.ffn_norm, n, c.norm_eps, xb_.data());
    matmul_swiglu(w.w_gate, w.w_up, xb_.data(), n, gate_.data(), up_.data(), pool_);
    matmul(w.w_down, gate_.data(), n, proj_.data(), pool_);
    add_inplace(x_.data(), proj_.data(), int64_t(size_t(n) * dim));
    require_finite_activations(x_.data(), size_t(n) * dim, l);  // NaN weights: an error, not junk
  }

  if (logit_rows == 0) return;
  // The rows that want logits, normed side by side, then one product for all of them.
  int out_row = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    const SeqSpan& sp = spans[s];
    if (steps[s].mode == Logits::none) continue;
    const int first = steps[s].mode == Logits::all ? 0 : sp.n - 1;
    const int rows = sp.n - first;
    rms_rows(x_.data() + size_t(sp.row0 + first) * dim, model_.output_norm(), rows, c.norm_eps,
             xb_.data() + size_t(out_row) * dim);
    out_row += rows;
  }
  const auto vocab = size_t(c.vocab);
  // One sequence writes straight into its own vector: no copy on the single-sequence path.
  std::vector<float>& all = steps.size() == 1 ? *steps[0].logits : batch_logits_;
  all.resize(size_t(logit_rows) * vocab);
  matmul(model_.output(), xb_.data(), logit_rows, all.data(), pool_);
  require_finite_activations(all.data(), all.size(), -1);
  if (steps.size() == 1) return;
  out_row = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    if (steps[s].mode == Logits::none) continue;
    const size_t rows = steps[s].mode == Logits::all ? size_t(spans[s].n) : 1;
    steps[s].logits->assign(all.begin() + long(size_t(out_row) * vocab),
                            all.begin() + long((size_t(out_row) + rows) * vocab));
    out_row += int(rows);
  }
}

int64_t Engine::span_distance(const ModelCache& cache) const {
  return squeezekv::span_distance(cache.config(), model_.config().context_length);
}

void Engine::forward_in_pieces(std::span<const int32_t> tokens, ModelCache& cache, Logits mode,
                               std::vector<float>& logits, int piece) {
  const int n = int(tokens.size());
  const auto vocab = size_t(model_.config().vocab);
  std::vector<float> part;
  if (mode == Logits::all) logits.resize(size_t(n) * vocab);
  for (int first = 0; first < n; first += piece) {
    const int count = std::min(piece, n - first);
    const bool last = first + count == n;
    const Logits want = mode == Logits::all ? Logits::all : (last ? mode : Logits::none);
    forward(tokens.subspan(size_t(first), size_t(count)), cache, want, part);
    if (mode == Logits::all) std::copy(part.begin(), part.end(), logits.begin() + long(size_t(first) * vocab));
    else if (last && mode == Logits::last) logits.swap(part);
  }
}

void Engine::patch_clamped_keys(const LayerCache& layer, int64_t clamped_at) {
  const ModelConfig& c = model_.config();
  const auto hd = size_t(c.head_dim);
  const auto n_kv = size_t(c.n_kv_heads);
  // Rows at position 0 in the cache (the sinks, once a stream passes the distance) are few: their
  // keys are turned forward to clamped_at into a small side buffer, and the attention reads the
  // rest of the head's rows as stored.
  size_t most = 0;
  if (clamp_counts_.size() < n_kv) clamp_counts_.resize(n_kv);
  for (size_t g = 0; g < n_kv; ++g) {
    const HeadStore& head = layer.head(int(g));
    size_t count = 0;
    for (int s = 0; s < head.n_slots(); ++s) count += head.at_origin(s) ? 1 : 0;
    clamp_counts_[g] = count;
    most = std::max(most, count);
  }
  clamp_stride_ = most;
  if (most == 0) return;
  if (clamp_slots_.size() < n_kv * most) clamp_slots_.resize(n_kv * most);
  if (clamp_keys_.size() < n_kv * most * hd) clamp_keys_.resize(n_kv * most * hd);
  clamp_cos_sin_.resize(size_t(c.n_rot));
  rope_cache(clamped_at, c.n_rot, c.rope_base, clamp_cos_sin_.data());
  for (size_t g = 0; g < n_kv; ++g) {
    const HeadStore& head = layer.head(int(g));
    size_t j = 0;
    for (int s = 0; s < head.n_slots(); ++s) {
      if (!head.at_origin(s)) continue;
      float* key = clamp_keys_.data() + (g * most + j) * hd;
      head.load_key(s, key);
      rope_apply(key, c.n_rot, c.rope_style, clamp_cos_sin_.data());
      clamp_slots_[g * most + j] = s;
      ++j;
    }
  }
}

void Engine::attention(LayerCache& layer, int row0, int n, int64_t pos0, bool ranks, int64_t clamped_at) {
  const ModelConfig& c = model_.config();
  const auto hd = size_t(c.head_dim);
  const auto group = size_t(c.group());
  const size_t q_dim = size_t(c.n_heads) * hd;
  const float scale = 1.0f / std::sqrt(float(c.head_dim));
  int max_slots = 0;
  for (int g = 0; g < c.n_kv_heads; ++g) max_slots = std::max(max_slots, layer.head(g).n_slots());
  // Per worker: the group's logits [group, ld] then the slot mask (ld bytes).
  const size_t ld = (size_t(max_slots) + 15) / 16 * 16;
  for (auto& s : scratch_) {
    if (s.size() < group * ld + ld / 4) s.resize(group * ld + ld / 4);
  }
  int32_t most_shift = 0;
  if (ranks) {
    for (int g = 0; g < c.n_kv_heads; ++g) most_shift = std::max(most_shift, layer.head(g).max_shift());
  }
  // Quantized keys, and every key in a decode step, are decoded and turned back as the kernel
  // reads them, never copied whole (a prompt chunk's quantized and KIVI keys a tile at a time in
  // attention_in_blocks). A prompt chunk's float keys are turned once per layer into rot_keys_,
  // shared by the chunk's queries (the fused kernel would turn each row once a query).
  const bool fused_turn = n == 1 || kv_quantized(layer.head(0).key_type()) || kv_kivi(layer.head(0).key_type());
  if (most_shift > 0) {
    ensure_rank_table(int64_t(most_shift) + 1);
    if (fused_turn) {
      for (int g = 0; g < c.n_kv_heads; ++g) rotated_[size_t(g)] = layer.head(g).max_shift() > 0;
    } else {
      rotate_keys(layer, size_t(max_slots));
    }
  }
  clamp_stride_ = 0;
  if (clamped_at >= 0) patch_clamped_keys(layer, clamped_at);
  const bool feed = layer.wants_attention();
  const size_t probs_per_head = size_t(n) * size_t(max_slots);
  if (feed && group_probs_.size() < size_t(c.n_kv_heads) * probs_per_head) {
    group_probs_.resize(size_t(c.n_kv_heads) * probs_per_head);
  }

  const bool heads_alone = n == 1 && layer.policy().heads_independent();
  // One task per (KV head, token): the group's query heads read each K and V row once together.
  auto task = [&](size_t index, size_t worker) {
    const int g = int(index) / n, t = int(index) % n;
    const HeadStore& head = layer.head(g);
    const int n_slots = head.n_slots();
    float* logits = scratch_[worker].data();
    auto* mask = reinterpret_cast<uint8_t*>(logits + group * ld);
    const int64_t query_pos = pos0 + t;
    const int64_t* pos = head.positions();
    // Slots past the last one this query may see are left out of every kernel (in a prompt the
    // rows come in position order, so a causal query reads only its prefix).
    int hi = 0;
    for (int s = 0; s < n_slots; ++s) {  // branch-free: free slots lie among live ones at random
      const bool seen = (pos[s] != HeadStore::kFree) & (pos[s] <= query_pos);
      mask[s] = seen;
      hi = seen ? s + 1 : hi;
    }
    const float* q = q_.data() + size_t(row0 + t) * q_dim + size_t(g) * group * hd;
    // Keys turned back to their ranks (positions inside the cache) when any was shifted.
    const bool rotated = most_shift > 0 && rotated_[size_t(g)];
    if (rotated && fused_turn) {  // ranks (never together with span's patches)
      head.key_probs_rotated(q, group, hd, size_t(hi), size_t(c.n_rot), c.rope_style == RopeStyle::neox, turns_.data(),
                             mask, scale, logits, ld);
    } else {
      RowPatches patches;
      if (clamp_stride_ > 0) {
        patches = {clamp_keys_.data() + size_t(g) * clamp_stride_ * hd, clamp_slots_.data() + size_t(g) * clamp_stride_,
                   clamp_counts_[size_t(g)]};
      }
      if (rotated) {
        query_probs_patched(q, group, hd, rot_keys_.data() + size_t(g) * size_t(max_slots) * hd, KVType::f32,
                            size_t(hi), hd, mask, scale, logits, ld, patches);
      } else {
        head.key_probs(q, group, hd, size_t(hi), mask, scale, logits, ld, patches);
      }
    }
    float* out = att_.data() + size_t(row0 + t) * q_dim + size_t(g) * group * hd;
    std::fill(out, out + group * hd, 0.0f);
    head.add_weighted_values(logits, group, ld, size_t(hi), out, hd);
    if (feed) feed_probs(g, t, logits, ld, hi, n_slots, probs_per_head);
    // A decode step's task holds the head's only query: its scores are updated here, on the
    // worker, when the policy lets heads be scored at once.
    if (feed && heads_alone) layer.add_attention(g, group_probs_.data() + size_t(g) * probs_per_head, n);
  };
  // (attention_in_blocks leaves quantized keys turned back by ranks to the fused token path)
  const bool blocks = attention_in_blocks(layer, row0, n, pos0, max_slots, most_shift > 0, feed, probs_per_head);
  if (!blocks) {
    const size_t n_tasks = size_t(c.n_kv_heads) * size_t(n);
    const int64_t work = int64_t(c.n_heads) * n * max_slots * c.head_dim;
    if (pool_ && n_tasks > 1 && work >= kMatmulParallelMacs) {
      pool_->parallel_for(n_tasks, task);
    } else {
      for (size_t i = 0; i < n_tasks; ++i) task(i, 0);
    }
  }
  if (!feed || (heads_alone && !blocks)) return;
  for (int g = 0; g < c.n_kv_heads; ++g) layer.add_attention(g, group_probs_.data() + size_t(g) * probs_per_head, n);
}

void Engine::feed_probs(int g, int t, const float* probs, size_t ld, int hi, int n_slots, size_t probs_per_head) {
  const auto group = size_t(model_.config().group());
  float* dst = group_probs_.data() + size_t(g) * probs_per_head + size_t(t) * size_t(n_slots);
  for (int s = 0; s < hi; ++s) {
    float sum = 0.0f;
    for (size_t i = 0; i < group; ++i) sum += probs[i * ld + size_t(s)];
    dst[s] = sum;
  }
  std::fill(dst + hi, dst + n_slots, 0.0f);
}

}  // namespace squeezekv
