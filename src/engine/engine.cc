// The forward pass (engine.h): embeddings, then per layer the attention block and the MLP block as
// the layer's LayerConfig says, then the final norm and the logits. Positions live in
// engine_positions.cc, attention over the cache in engine_attention.cc and prompt_attention.cc,
// the allocator's measurement feed in engine_measure.cc.
#include "squeezekv/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/finite_check.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/methods/registry.h"
#include "squeezekv/ops/gelu.h"

namespace squeezekv {

Engine::Engine(const Model& model, ThreadPool* pool) : model_(model), pool_(pool) {
  scratch_.resize(pool ? pool->num_workers() : 1);
  head_rank0_.resize(size_t(model.config().n_kv_heads));
  rotated_.resize(size_t(model.config().n_kv_heads));
  // One rope table per distinct base, shared by the layers that turn at it.
  for (const LayerConfig& lc : model.config().layers) {
    auto same = [&lc](const RopeTable& t) { return t.base == lc.rope_base; };
    auto it = std::find_if(rope_tables_.begin(), rope_tables_.end(), same);
    if (it == rope_tables_.end()) {
      RopeTable table;
      table.base = lc.rope_base;
      rope_tables_.push_back(std::move(table));
      it = rope_tables_.end() - 1;
    }
    layer_rope_.push_back(int(it - rope_tables_.begin()));
  }
}

KVCacheConfig Engine::resolved_config(KVCacheConfig config) const {
  config.head_dim = model_.config().head_dim;
  if (config.max_distance == 0) config.max_distance = std::max<int64_t>(model_.config().context_length - 1, 0);
  return config;
}

std::unique_ptr<ModelCache> Engine::make_cache(KVCacheConfig config) const {
  config = resolved_config(std::move(config));
  // A sliding layer's cache holds its window, the model's own attention (core/layer_kind.h); every
  // global layer is the method's. Llama and Qwen2 layers are all global: no kinds, today's cache.
  return std::make_unique<ModelCache>(config, model_.config().n_layers, model_.config().n_kv_heads, /*n_batch=*/1,
                                      model_.config().layer_kinds());
}

void Engine::begin_prompt(ModelCache& cache) { cache.begin_prompt(); }

void Engine::end_prompt(ModelCache& cache) { cache.end_prompt(); }

void Engine::reserve(int n) {
  if (n <= capacity_) return;
  const ModelConfig& c = model_.config();
  const auto rows = size_t(n);
  const auto q_dim = size_t(c.q_dim());
  const auto kv_dim = size_t(c.kv_dim());
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
  for (RopeTable& t : rope_tables_) t.by_token.resize(rows * size_t(c.n_rot));
  capacity_ = n;
}

namespace {

void add_bias(float* x, const std::vector<float>& bias, int n_rows) {
  if (bias.empty()) return;
  for (int t = 0; t < n_rows; ++t) add_inplace(x + size_t(t) * bias.size(), bias.data(), int64_t(bias.size()));
}

// RMS norm of each of n rows of weight.size() values (out may equal x).
void rms_rows(const float* x, const std::vector<float>& weight, int n, float eps, float* out) {
  const auto dim = int64_t(weight.size());
  for (int t = 0; t < n; ++t)
    rms_norm(x + size_t(t) * size_t(dim), weight.data(), dim, eps, out + size_t(t) * size_t(dim));
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

void Engine::forward(std::span<const int32_t> tokens, ModelCache& cache, Logits mode, std::vector<float>& logits) {
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
  OpTimer timer(profile_);

  spans_.clear();
  any_measure_ = false;
  int row = 0;
  for (const SequenceStep& step : steps) {
    ModelCache& cache = *step.cache;
    const int n_s = int(step.tokens.size());
    const int64_t pos0 = cache.layer(0).tokens_seen();
    const bool measure = measures_residual(cache);
    any_measure_ = any_measure_ || measure;
    spans_.push_back({row, n_s, pos0, measure, span_distance(cache)});
    for (int t = 0; t < n_s; ++t) {
      float* x = x_.data() + size_t(row + t) * dim;
      model_.embed(step.tokens[size_t(t)], x);
      if (c.embed_scale != 0.0f) scale_inplace(x, c.dim, c.embed_scale);
      for (RopeTable& table : rope_tables_) {
        rope_cache(pos0 + t, c.n_rot, table.base, table.by_token.data() + size_t(row + t) * size_t(c.n_rot));
      }
    }
    row += n_s;
  }
  timer.lap(EngineOp::embed);

  for (int l = 0; l < c.n_layers; ++l) {
    if (observer_ || any_measure_) std::copy(x_.begin(), x_.begin() + long(size_t(n) * dim), before_.begin());
    timer.lap(EngineOp::measure);
    attention_block(l, steps, n, timer);
    feed_residual(l, steps);
    timer.lap(EngineOp::measure);
    mlp_block(l, n, timer);
    require_finite_activations(x_.data(), size_t(n) * dim, l);  // NaN weights: an error, not junk
    timer.lap(EngineOp::norms);
  }
  if (logit_rows > 0) output_logits(steps, logit_rows);
  timer.lap(EngineOp::logits);
}

void Engine::attention_block(int l, std::span<const SequenceStep> steps, int n, OpTimer& timer) {
  const ModelConfig& c = model_.config();
  const LayerConfig& lc = c.layers[size_t(l)];
  const LayerWeights& w = model_.layer(l);
  const auto dim = size_t(c.dim);
  const auto kv_dim = size_t(c.kv_dim());
  const auto hd = size_t(c.head_dim);
  rms_rows(x_.data(), w.attn_norm, n, c.norm_eps, xb_.data());
  timer.lap(EngineOp::norms);
  // q, k and v in one parallel region: one hand-off instead of three.
  const MatmulOutput qkv[3] = {{&w.wq, q_.data()}, {&w.wk, k_.data()}, {&w.wv, v_.data()}};
  matmul_many(qkv, xb_.data(), n, pool_);
  timer.lap(EngineOp::qkv);
  add_bias(q_.data(), w.bq, n);
  add_bias(k_.data(), w.bk, n);
  add_bias(v_.data(), w.bv, n);
  if (lc.qk_norm) {  // each head of each row on its own
    rms_rows(q_.data(), w.q_norm, n * c.n_heads, c.norm_eps, q_.data());
    rms_rows(k_.data(), w.k_norm, n * c.n_kv_heads, c.norm_eps, k_.data());
  }
  timer.lap(EngineOp::norms);
  for (size_t s = 0; s < steps.size(); ++s) {
    const SeqSpan& sp = spans_[s];
    ModelCache& cache = *steps[s].cache;
    LayerCache& layer = cache.layer(l);
    if (layer.wants_queries()) {  // before RoPE: a policy that models the coming queries turns them itself
      const size_t q_dim = size_t(c.n_heads) * hd;
      layer.add_queries({q_.data() + size_t(sp.row0) * q_dim, sp.n, c.n_heads, q_dim, sp.pos0, c.rope_style, c.n_rot,
                         lc.rope_base, lc.attention_scale});
    }
    const bool ranks = rotate_queries_and_keys(l, sp, cache);
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
    if (clamped_at >= 0) layer.rotate_keys_to_origin(clamped_at, c.n_rot, c.rope_style, lc.rope_base);
    timer.lap(EngineOp::cache_write);
    attention(l, layer, sp.row0, sp.n, sp.pos0, ranks, clamped_at);
    timer.lap(EngineOp::attention);
    layer.end_update(pool_);
    timer.lap(EngineOp::cache_settle);
  }
  matmul(w.wo, att_.data(), n, proj_.data(), pool_);
  timer.lap(EngineOp::attn_out);
  if (lc.post_norms) rms_rows(proj_.data(), w.post_attn_norm, n, c.norm_eps, proj_.data());
  add_inplace(x_.data(), proj_.data(), int64_t(size_t(n) * dim));
  timer.lap(EngineOp::norms);
}

void Engine::mlp_block(int l, int n, OpTimer& timer) {
  const ModelConfig& c = model_.config();
  const LayerConfig& lc = c.layers[size_t(l)];
  const LayerWeights& w = model_.layer(l);
  const auto dim = size_t(c.dim);
  rms_rows(x_.data(), w.ffn_norm, n, c.norm_eps, xb_.data());
  timer.lap(EngineOp::norms);
  if (lc.activation == Activation::silu) {
    matmul_swiglu(w.w_gate, w.w_up, xb_.data(), n, gate_.data(), up_.data(), pool_);
  } else {
    const MatmulOutput gate_up[2] = {{&w.w_gate, gate_.data()}, {&w.w_up, up_.data()}};
    matmul_many(gate_up, xb_.data(), n, pool_);
    geglu(gate_.data(), up_.data(), int64_t(n) * c.ffn_dim, gate_.data());
  }
  timer.lap(EngineOp::mlp_up);
  matmul(w.w_down, gate_.data(), n, proj_.data(), pool_);
  timer.lap(EngineOp::mlp_down);
  if (lc.post_norms) rms_rows(proj_.data(), w.post_ffn_norm, n, c.norm_eps, proj_.data());
  add_inplace(x_.data(), proj_.data(), int64_t(size_t(n) * dim));
}

void Engine::output_logits(std::span<const SequenceStep> steps, int logit_rows) {
  const ModelConfig& c = model_.config();
  const auto dim = size_t(c.dim);
  // The rows that want logits, normed side by side, then one product for all of them.
  int out_row = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    const SeqSpan& sp = spans_[s];
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
    const size_t rows = steps[s].mode == Logits::all ? size_t(spans_[s].n) : 1;
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

}  // namespace squeezekv
