// The position rules of the forward pass (engine.h, docs/positions.md): queries and keys turned by
// their text positions or, once a layer has evicted under PositionRule::cache, by their ranks
// among the rows each head holds (the rank tables); kept keys turned back by their shifts; and
// under PositionRule::span the rows clamped to position 0 turned forward to the clamped position.
// Each layer turns at its own rope base (one table per distinct base).
#include <algorithm>

#include "squeezekv/engine/engine.h"
#include "squeezekv/ops/kv_rows.h"

namespace squeezekv {

bool Engine::rotate_queries_and_keys(int l, const SeqSpan& sp, ModelCache& cache) {
  const ModelConfig& c = model_.config();
  const LayerCache& layer = cache.layer(l);
  RopeTable& table = rope_table(l);
  const auto hd = size_t(c.head_dim);
  const auto q_dim = size_t(c.q_dim());
  const auto kv_dim = size_t(c.kv_dim());
  // Ranks replace text positions once the layer has evicted (before, the two are equal).
  bool ranks = false;
  if (cache.config().positions == PositionRule::cache) {
    int64_t most = 0;
    for (int h = 0; h < c.n_kv_heads; ++h) {
      head_rank0_[size_t(h)] = layer.head(h).n_live();
      ranks = ranks || head_rank0_[size_t(h)] < sp.pos0;
      most = std::max(most, head_rank0_[size_t(h)]);
    }
    if (ranks) ensure_rank_table(table, most + sp.n);
  }
  const auto n_rot = size_t(c.n_rot);
  auto by_rank = [&](int64_t rank) { return table.by_rank.data() + size_t(rank) * n_rot; };
  const int group = c.group();
  for (int t = 0; t < sp.n; ++t) {
    const size_t r = size_t(sp.row0 + t);
    const float* cs = table.by_token.data() + r * n_rot;
    for (int h = 0; h < c.n_heads; ++h) {
      const float* rot = ranks ? by_rank(head_rank0_[size_t(h / group)] + t) : cs;
      rope_apply(q_.data() + r * q_dim + size_t(h) * hd, c.n_rot, c.rope_style, rot);
    }
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const float* rot = ranks ? by_rank(head_rank0_[size_t(h)] + t) : cs;
      rope_apply(k_.data() + r * kv_dim + size_t(h) * hd, c.n_rot, c.rope_style, rot);
    }
  }
  return ranks;
}

void Engine::ensure_rank_table(RopeTable& table, int64_t rows) {
  if (rows <= table.rank_rows) return;
  // Doubling: the table stops growing once the cache holds its budget (ranks stay below it).
  const int64_t grown = std::max(rows, 2 * table.rank_rows);
  const auto n_rot = size_t(model_.config().n_rot);
  const bool neox = model_.config().rope_style == RopeStyle::neox;
  table.by_rank.resize(size_t(grown) * n_rot);
  table.turns.resize(size_t(grown) * 2 * n_rot);
  for (int64_t r = table.rank_rows; r < grown; ++r) {
    float* cs = table.by_rank.data() + size_t(r) * n_rot;
    rope_cache(r, int64_t(n_rot), table.base, cs);
    rope_turn_row(cs, n_rot, neox, table.turns.data() + size_t(r) * 2 * n_rot);
  }
  table.rank_rows = grown;
}

void Engine::rotate_keys(const RopeTable& table, const LayerCache& layer, size_t ld_rows) {
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
                     c.rope_style == RopeStyle::neox, table.turns.data(), rot_keys_.data() + g * ld_rows * hd);
  };
  const int64_t work = int64_t(c.n_kv_heads) * int64_t(ld_rows) * c.head_dim;
  if (pool_ && c.n_kv_heads > 1 && work >= kMatmulParallelMacs) {
    pool_->parallel_for(size_t(c.n_kv_heads), rotate);
  } else {
    for (size_t g = 0; g < size_t(c.n_kv_heads); ++g) rotate(g, 0);
  }
}

void Engine::patch_clamped_keys(const LayerCache& layer, int64_t clamped_at, float rope_base) {
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
  rope_cache(clamped_at, c.n_rot, rope_base, clamp_cos_sin_.data());
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

}  // namespace squeezekv
