// A prompt chunk's attention in blocks (Engine::attention_in_blocks, see engine.h).
//
// Token by token, each query's logits are dots of one query with every key. In a chunk of many
// tokens, a block of tokens' queries (their whole GQA groups) instead goes through
// query_block_dots, a register-tiled product with one lane per key and no horizontal sums, whose
// key columns stay in L1 across the block's queries. Float keys are transposed once per layer
// (f32 [head_dim, slots] per KV head); quantized and KIVI keys, which are never decoded whole,
// are decoded and transposed a tile of 64 rows at a time by each block (64 queries a block, so
// that each decoded row serves many). The softmax, the weighted sum of values and the
// probabilities fed to the policy are then those of the token path. The logits round differently
// from the token path's (another order of the same products), so a chunk's results equal the
// token path's to float rounding, not to the bit.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "squeezekv/engine/engine.h"
#include "engine/visible_slots.h"
#include "squeezekv/ops/kv_rows.h"
#include "squeezekv/ops/thread_pool.h"

namespace squeezekv {
namespace {

// Chunks shorter than this keep the token path (the transposition would not pay for itself).
constexpr int kMinBlockTokens = 16;

// Queries per block (tokens x the GQA group): each block streams the layer's transposed keys and
// values through the caches once, so more queries a block read them fewer times (16 -> 64: Gemma
// 3's attention at depth 8192, one KV head of 8,704 rows, 1.39 -> 1.30 ms per prompt token).
// Then the cap on the transposed keys of one layer.
constexpr size_t kBlockQueries = 64;
constexpr size_t kMaxTransposedBytes = size_t(64) << 20;

// Quantized keys (q8_0, q4_0, KIVI) are never decoded whole (the storage formats promise no
// dequantized copy of the cache): each block decodes them a tile of kTileRows rows at a time into
// its worker's scratch (hd x 64 floats, in L1), transposed, and runs its queries on the tile. A
// block then holds more queries (kTiledQueries), so that each decoded row serves more of them.
constexpr size_t kTileRows = 64;
constexpr size_t kTiledQueries = 64;

// A worker's logits (a block's queries x slots) are capped at this: fewer tokens a block over a
// long cache.
constexpr size_t kMaxLogitBytes = size_t(16) << 20;

// Rows before every query's window (a sliding layer's) are skipped in steps of this many slots: a
// multiple of both key tiles (query_block_dots' 32 columns, kTileRows) and of any vector's lanes.
constexpr int kSkipAlign = 64;

}  // namespace

bool Engine::attention_in_blocks(int l, LayerCache& layer, int row0, int n, int64_t pos0, int max_slots,
                                 bool any_rotated, bool feed, size_t probs_per_head) {
  const ModelConfig& c = model_.config();
  const LayerConfig& lc = c.layers[size_t(l)];
  const RopeTable& table = rope_table(l);
  if (!prompt_blocks_ || n < kMinBlockTokens || max_slots == 0) return false;
  // Float keys are transposed whole, once per layer; any other format a tile at a time per block
  // (turned back by ranks in the tile when they are shifted).
  const bool tiled = !kv_float(layer.head(0).key_type());
  const auto hd = size_t(c.head_dim);
  const auto group = size_t(c.group());
  const auto n_kv = size_t(c.n_kv_heads);
  const size_t ld_kt = transposed_keys_stride(size_t(max_slots));
  const size_t q_dim = size_t(c.n_heads) * hd;
  const float scale = lc.attention_scale;
  const int64_t window = lc.attention == AttentionKind::sliding ? lc.window : 0;

  // Per worker: block_tokens x group logit rows of ld_kt, as many masks of ld_kt bytes, then the
  // block's queries and outputs (block_tokens x group x hd each), then the decoded keys: one
  // layer's f16 keys widened (transposed path), or one tile (tiled path).
  size_t block_tokens = std::clamp<size_t>((tiled ? kTiledQueries : kBlockQueries) / group, 1, kTiledQueries);
  // A short chunk over few KV heads: smaller blocks, so that every worker gets one.
  const size_t workers = pool_ != nullptr ? pool_->num_workers() : 1;
  if (n_kv < workers) block_tokens = std::min(block_tokens, (size_t(n) * n_kv + workers - 1) / workers);
  block_tokens = std::min(block_tokens, std::max<size_t>(1, kMaxLogitBytes / (group * ld_kt * sizeof(float))));
  const size_t rows = block_tokens * group;
  if (rows * ld_kt * sizeof(float) > kMaxLogitBytes ||
      (!tiled && n_kv * hd * ld_kt * sizeof(float) > kMaxTransposedBytes)) {
    return false;
  }
  if (!tiled && keys_t_.size() < n_kv * hd * ld_kt) keys_t_.resize(n_kv * hd * ld_kt);
  const size_t keys_at = rows * ld_kt + block_tokens * ld_kt / 4 + 2 * rows * hd;
  // The tiled path's tile, then its rows turned back (untransposed) when ranks shift them.
  const size_t need = keys_at + (tiled ? 2 * kTileRows * hd : size_t(max_slots) * hd);
  for (auto& s : scratch_) {
    if (s.size() < need) s.resize(need);
  }

  // Columns [first, first + cols) of head g's transposed keys (column j at kt + j - first, rows ld
  // apart): the span rule's clamped rows read through their patch keys, as in the token path.
  auto patch_clamped = [&](size_t g, float* kt, size_t ld, size_t first, size_t cols) {
    for (size_t j = 0; clamp_stride_ > 0 && j < clamp_counts_[g]; ++j) {
      const auto slot = size_t(clamp_slots_[g * clamp_stride_ + j]);
      if (slot < first || slot >= first + cols) continue;
      const float* patch = clamp_keys_.data() + (g * clamp_stride_ + j) * hd;
      for (size_t d = 0; d < hd; ++d) kt[d * ld + (slot - first)] = patch[d];
    }
  };

  // Each head's keys, as the token path reads them (turned back to their ranks, or as stored with
  // the clamped rows' keys patched in), transposed; padding columns zeroed. f32 keys (and turned
  // ones) are read in place; f16 ones are widened once into the worker's scratch.
  auto transpose = [&](size_t g, size_t worker) {
    const HeadStore& head = layer.head(int(g));
    const auto n_slots = size_t(head.n_slots());
    const float* keys = nullptr;
    if (any_rotated && rotated_[g]) {
      keys = rot_keys_.data() + g * size_t(max_slots) * hd;
    } else if (head.key_type() == KVType::f32) {
      keys = static_cast<const float*>(head.keys());
    } else {
      float* decoded = scratch_[worker].data() + keys_at;
      head.load_keys(0, int(n_slots), decoded);
      keys = decoded;
    }
    float* kt = keys_t_.data() + g * hd * ld_kt;
    for (size_t d = 0; d < hd; ++d) {
      float* col = kt + d * ld_kt;
      for (size_t s = 0; s < n_slots; ++s) col[s] = keys[s * hd + d];
      std::fill(col + n_slots, col + ld_kt, 0.0f);
    }
    patch_clamped(g, kt, ld_kt, 0, n_slots);
  };
  if (!tiled && pool_ != nullptr && n_kv > 1) {
    pool_->parallel_for(n_kv, transpose);
  } else if (!tiled) {
    for (size_t g = 0; g < n_kv; ++g) transpose(g, 0);
  }

  // Logit columns [lo, hi) (lo a multiple of kTileRows) of the block's queries from head g's keys
  // decoded kTileRows at a time (as the token path reads them: the clamped rows' keys patched in);
  // padding columns zeroed.
  auto tiled_dots = [&](size_t g, const float* queries, size_t n_queries, size_t lo, size_t hi, float* logits,
                        size_t worker) {
    const HeadStore& head = layer.head(int(g));
    float* tile = scratch_[worker].data() + keys_at;
    float* turned = tile + kTileRows * hd;
    for (size_t first = lo; first < hi; first += kTileRows) {
      const size_t cols = std::min(kTileRows, hi - first);
      if (any_rotated && rotated_[g]) {  // ranks: decoded and turned back as the token path reads them
        head.load_keys(int(first), int(cols), turned);
        rotate_rows_back(turned, KVType::f32, head.shifts() + first, cols, hd, size_t(c.n_rot),
                         c.rope_style == RopeStyle::neox, table.turns.data(), turned);
        for (size_t d = 0; d < hd; ++d) {
          for (size_t j = 0; j < cols; ++j) tile[d * kTileRows + j] = turned[j * hd + d];
        }
      } else {
        head.load_keys_transposed(int(first), int(cols), tile, kTileRows);
      }
      for (size_t d = 0; cols < kTileRows && d < hd; ++d)
        std::fill(tile + d * kTileRows + cols, tile + (d + 1) * kTileRows, 0.0f);
      patch_clamped(g, tile, kTileRows, first, cols);
      query_block_dots(queries, n_queries, hd, tile, kTileRows, cols, hd, logits + first, ld_kt);
    }
  };

  const size_t n_blocks = (size_t(n) + block_tokens - 1) / block_tokens;
  auto task = [&](size_t index, size_t worker) {
    const size_t g = index / n_blocks, t0 = (index % n_blocks) * block_tokens;
    const size_t bt = std::min(block_tokens, size_t(n) - t0);
    const HeadStore& head = layer.head(int(g));
    const int n_slots = head.n_slots();
    const int64_t* pos = head.positions();
    float* logits = scratch_[worker].data();
    auto* masks = reinterpret_cast<uint8_t*>(logits + rows * ld_kt);
    float* queries = logits + rows * ld_kt + block_tokens * ld_kt / 4;
    float* outs = queries + rows * hd;
    int his[kTiledQueries], los[kTiledQueries];
    int hi_max = 0, lo_min = n_slots;
    for (size_t i = 0; i < bt; ++i) {
      const int64_t query_pos = pos0 + int64_t(t0 + i);
      const int64_t oldest = window > 0 ? query_pos - window + 1 : 0;  // a sliding layer's window
      uint8_t* mask = masks + i * ld_kt;
      const VisibleSpan span = mark_visible_slots(pos, n_slots, query_pos, oldest, mask);
      // A sliding layer's rows before the window: skipped from a multiple of kSkipAlign below the
      // token's first visible row (its own, so a token's softmax does not depend on its block).
      los[i] = span.lo / kSkipAlign * kSkipAlign;
      his[i] = span.hi;
      hi_max = std::max(hi_max, span.hi);
      lo_min = std::min(lo_min, los[i]);
      const float* q = q_.data() + size_t(row0) * q_dim + (t0 + i) * q_dim + g * group * hd;
      std::memcpy(queries + i * group * hd, q, group * hd * sizeof(float));
    }
    const auto lo = size_t(std::min(lo_min, hi_max));
    if (tiled) {
      tiled_dots(g, queries, bt * group, lo, size_t(hi_max), logits, worker);
    } else {
      query_block_dots(queries, bt * group, hd, keys_t_.data() + g * hd * ld_kt + lo, ld_kt, size_t(hi_max) - lo, hd,
                       logits + lo, ld_kt);
    }
    for (size_t i = 0; i < bt; ++i) {
      const auto from = size_t(std::min(los[i], his[i]));
      for (size_t h = 0; h < group; ++h) {
        float* row = logits + (i * group + h) * ld_kt;
        std::fill(row, row + from, 0.0f);
        masked_softmax(row + from, masks + i * ld_kt + from, size_t(his[i]) - from, scale);
        std::fill(row + his[i], row + hi_max, 0.0f);  // past this token's last visible row
      }
    }
    std::fill(outs, outs + bt * group * hd, 0.0f);
    head.add_weighted_values(logits, bt * group, ld_kt, size_t(hi_max), outs, hd);
    for (size_t i = 0; i < bt; ++i) {
      float* out = att_.data() + size_t(row0) * q_dim + (t0 + i) * q_dim + g * group * hd;
      std::memcpy(out, outs + i * group * hd, group * hd * sizeof(float));
      if (feed) feed_probs(int(g), int(t0 + i), logits + i * group * ld_kt, ld_kt, his[i], n_slots, probs_per_head);
    }
  };
  const size_t n_tasks = n_kv * n_blocks;
  if (pool_ != nullptr && n_tasks > 1) {
    pool_->parallel_for(n_tasks, task);
  } else {
    for (size_t i = 0; i < n_tasks; ++i) task(i, 0);
  }
  return true;
}

}  // namespace squeezekv
