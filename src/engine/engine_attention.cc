// Attention over the cache (engine.h): each (KV head, token) task reads the head's kept rows once
// for its whole GQA group, masked to what the query may see (causal, and a sliding layer's
// window), with keys turned back by ranks or clamped as the position rule says
// (engine_positions.cc); a prompt chunk's attention may go in blocks (prompt_attention.cc). The
// probabilities are fed back to the policies that score rows by attention.
#include <algorithm>
#include <cmath>

#include "squeezekv/engine/engine.h"
#include "squeezekv/engine/reconstruction.h"
#include "engine/visible_slots.h"
#include "squeezekv/ops/kv_rows.h"

namespace squeezekv {

void Engine::attention(int l, LayerCache& layer, int row0, int n, int64_t pos0, bool ranks, int64_t clamped_at) {
  const ModelConfig& c = model_.config();
  const LayerConfig& lc = c.layers[size_t(l)];
  const RopeTable& table = rope_table(l);
  const auto hd = size_t(c.head_dim);
  const auto group = size_t(c.group());
  const size_t q_dim = size_t(c.n_heads) * hd;
  const float scale = lc.attention_scale;
  // A sliding layer's query at p sees keys at p - window + 1 .. p (llama.cpp's standard window).
  const int64_t window = lc.attention == AttentionKind::sliding ? lc.window : 0;
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
    ensure_rank_table(rope_table(l), int64_t(most_shift) + 1);
    if (fused_turn) {
      for (int g = 0; g < c.n_kv_heads; ++g) rotated_[size_t(g)] = layer.head(g).max_shift() > 0;
    } else {
      rotate_keys(table, layer, size_t(max_slots));
    }
  }
  clamp_stride_ = 0;
  if (clamped_at >= 0) patch_clamped_keys(layer, clamped_at, lc.rope_base);
  const bool feed = layer.wants_attention();
  // A reconstruction's attention goes back as each row's largest weight over the query heads
  // (feed_probs), read against the rows' positions.
  feed_span_ = feed ? layer.reconstruction() : nullptr;
  if (feed_span_ != nullptr) {
    recon_ld_ = size_t(max_slots);
    if (recon_masks_.size() < size_t(c.n_kv_heads) * 2 * recon_ld_)
      recon_masks_.resize(size_t(c.n_kv_heads) * 2 * recon_ld_);
    for (int g = 0; g < c.n_kv_heads; ++g) {
      float* m = recon_masks_.data() + size_t(g) * 2 * recon_ld_;
      reconstruction_masks(layer.head(g).positions(), layer.head(g).n_slots(), *feed_span_, m, m + recon_ld_);
    }
    if (feed_span_->by_output) prepare_output_weighting(l, layer, row0, n);
  }
  const size_t probs_per_head = size_t(n) * size_t(max_slots);
  if (feed && group_probs_.size() < size_t(c.n_kv_heads) * probs_per_head) {
    group_probs_.resize(size_t(c.n_kv_heads) * probs_per_head);
  }

  const bool heads_alone = n == 1 && layer.policy().heads_independent();
  // A decode step over fewer KV heads than workers (Gemma 3 has one) splits each group's query
  // heads into `parts`, one task each: every part reads the head's rows itself (the second read
  // mostly from the shared cache), where one task per head would leave workers idle. Each query's
  // arithmetic does not depend on its companions, so the split never changes the output. Only
  // where no attention is fed back: feeding sums the whole group's probabilities per row.
  size_t parts = 1;
  if (n == 1 && !feed && pool_ != nullptr && size_t(c.n_kv_heads) < pool_->num_workers()) {
    parts = std::min(group, pool_->num_workers() / size_t(c.n_kv_heads));
  }
  // One task per (KV head, token), or per (KV head, part): the query heads of a task read each K
  // and V row once together.
  auto task = [&](size_t index, size_t worker) {
    const int g = int(index / (size_t(n) * parts)), t = int(index % size_t(n));
    const size_t part = index / size_t(n) % parts;
    const size_t q0 = group * part / parts, nq = group * (part + 1) / parts - q0;
    const HeadStore& head = layer.head(g);
    const int n_slots = head.n_slots();
    float* logits = scratch_[worker].data();
    auto* mask = reinterpret_cast<uint8_t*>(logits + group * ld);
    const int64_t query_pos = pos0 + t;
    const int64_t oldest = window > 0 ? query_pos - window + 1 : 0;  // the first position it may see
    const int64_t* pos = head.positions();
    // Slots past the last one this query may see are left out of every kernel (in a prompt the
    // rows come in position order, so a causal query reads only its prefix).
    const int hi = mark_visible_slots(pos, n_slots, query_pos, oldest, mask).hi;
    const float* q = q_.data() + size_t(row0 + t) * q_dim + (size_t(g) * group + q0) * hd;
    // Keys turned back to their ranks (positions inside the cache) when any was shifted.
    const bool rotated = most_shift > 0 && rotated_[size_t(g)];
    if (rotated && fused_turn) {  // ranks (never together with span's patches)
      head.key_probs_rotated(q, nq, hd, size_t(hi), size_t(c.n_rot), c.rope_style == RopeStyle::neox,
                             table.turns.data(), mask, scale, logits, ld);
    } else {
      RowPatches patches;
      if (clamp_stride_ > 0) {
        patches = {clamp_keys_.data() + size_t(g) * clamp_stride_ * hd, clamp_slots_.data() + size_t(g) * clamp_stride_,
                   clamp_counts_[size_t(g)]};
      }
      if (rotated) {
        query_probs_patched(q, nq, hd, rot_keys_.data() + size_t(g) * size_t(max_slots) * hd, KVType::f32, size_t(hi),
                            hd, mask, scale, logits, ld, patches);
      } else {
        head.key_probs(q, nq, hd, size_t(hi), mask, scale, logits, ld, patches);
      }
    }
    float* out = att_.data() + size_t(row0 + t) * q_dim + (size_t(g) * group + q0) * hd;
    std::fill(out, out + nq * hd, 0.0f);
    head.add_weighted_values(logits, nq, ld, size_t(hi), out, hd);
    if (feed) feed_probs(g, t, logits, ld, hi, n_slots, probs_per_head);
    // A decode step's task holds the head's only query: its scores are updated here, on the
    // worker, when the policy lets heads be scored at once.
    if (feed && heads_alone) layer.add_attention(g, group_probs_.data() + size_t(g) * probs_per_head, n);
  };
  // (attention_in_blocks leaves quantized keys turned back by ranks to the fused token path)
  const bool blocks = attention_in_blocks(l, layer, row0, n, pos0, max_slots, most_shift > 0, feed, probs_per_head);
  if (!blocks) {
    const size_t n_tasks = size_t(c.n_kv_heads) * size_t(n) * parts;
    const int64_t work = int64_t(c.n_heads) * n * max_slots * c.head_dim;
    if (pool_ && n_tasks > 1 && work >= kMatmulParallelMacs) {
      pool_->parallel_for(n_tasks, task);
    } else {
      for (size_t i = 0; i < n_tasks; ++i) task(i, 0);
    }
  }
  if (!feed || (heads_alone && !blocks)) return;
  if (feed_span_ != nullptr) {
    // A reconstruction's scores are maxima: its tokens' rows fold into one before the policy reads them.
    for (int g = 0; g < c.n_kv_heads; ++g) {
      float* rows = group_probs_.data() + size_t(g) * probs_per_head;
      const auto n_slots = size_t(layer.head(g).n_slots());
      for (int t = 1; t < n; ++t) {
        const float* row = rows + size_t(t) * n_slots;
        for (size_t s = 0; s < n_slots; ++s) rows[s] = std::max(rows[s], row[s]);
      }
      layer.add_attention(g, rows, 1);
    }
    return;
  }
  for (int g = 0; g < c.n_kv_heads; ++g) layer.add_attention(g, group_probs_.data() + size_t(g) * probs_per_head, n);
}

void Engine::feed_probs(int g, int t, const float* probs, size_t ld, int hi, int n_slots, size_t probs_per_head) {
  const auto group = size_t(model_.config().group());
  float* dst = group_probs_.data() + size_t(g) * probs_per_head + size_t(t) * size_t(n_slots);
  if (feed_span_ != nullptr) {
    const float* m = recon_masks_.data() + size_t(g) * 2 * recon_ld_;
    OutputWeighting by;
    if (feed_span_->by_output)
      by = {recon_out_.data() + size_t(g) * group * recon_ld_, recon_ld_, recon_qscale_[size_t(t)]};
    reconstruction_weights(m, m + recon_ld_, probs, group, ld, hi, dst, by);
    std::fill(dst + hi, dst + n_slots, 0.0f);
    return;
  }
  for (int s = 0; s < hi; ++s) {
    float sum = 0.0f;
    for (size_t i = 0; i < group; ++i) sum += probs[i * ld + size_t(s)];
    dst[s] = sum;
  }
  std::fill(dst + hi, dst + n_slots, 0.0f);
}

}  // namespace squeezekv
