// Engine: the forward pass of a Model with a squeezekv ModelCache in the loop (llama2.c's order:
// embed, then per layer RMS norm, q/k/v, RoPE, attention over the cache's kept rows, output
// projection, gated MLP; final norm and logits), each layer as its LayerConfig says (Q/K norms,
// post-norms, the gate's activation, its rope base, its attention scale, a sliding window).
// Attention of each layer reads that layer's own kept rows, so every layer and head may hold a
// different number of tokens. A sliding layer's queries see only the keys of their window.
//
// Positions (docs/positions.md): with PositionRule::span (the default) queries and keys take their
// text positions, and rows the cache holds beyond max_distance (the sinks, in a stream) are read
// at that distance through keys turned in a side buffer. With PositionRule::cache, once a layer
// has evicted, a new key and query of head h are rotated by their rank among the rows h holds
// (rows held before the update plus the token's index in it), and a kept key is rotated back by
// its HeadStore shift when read; with PositionRule::text (or before any eviction, where both
// agree) by their text position.
//
// Buffers grow to the largest batch seen and are then reused: no allocation per token.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "squeezekv/cache/model_cache.h"
#include "squeezekv/engine/model.h"
#include "squeezekv/engine/op_profile.h"
#include "squeezekv/ops/thread_pool.h"

namespace squeezekv {

enum class Logits { none, last, all };

// Called per layer with the residual stream entering the layer (`before`) and after the
// attention residual add (`after`), both [n_tokens, dim]: the paper's layer-importance signal.
using ResidualObserver = std::function<void(int layer, const float* before, const float* after, int n_tokens, int dim)>;

// One sequence's share of a batched forward pass: its new tokens, its own cache (at the positions
// that follow what the cache has seen) and where its logits go.
struct SequenceStep {
  std::span<const int32_t> tokens;
  ModelCache* cache = nullptr;
  Logits mode = Logits::last;
  std::vector<float>* logits = nullptr;  // resized; may be null when mode is Logits::none
};

class Engine {
 public:
  // `pool` may be null (single-threaded); it must outlive the engine.
  Engine(const Model& model, ThreadPool* pool);

  // Runs `tokens` at the positions that follow what `cache` has seen. Writes logits ([vocab] for
  // Logits::last, [n, vocab] for Logits::all) into `logits` (resized). The cache must have the
  // model's layer count, KV heads and head dimension (InvalidArgument otherwise).
  void forward(std::span<const int32_t> tokens, ModelCache& cache, Logits mode, std::vector<float>& logits);

  // Several sequences in one pass (continuous batching): norms, projections and the MLP run over
  // every sequence's rows together, so the weights are read once for all of them; RoPE and
  // attention run per sequence over its own cache. Each sequence's logits are bit for bit what
  // forward() gives it alone (the matmuls compute every row independently of the others, see
  // ops/matmul.h). The observer sees each sequence's rows separately. The caches must be distinct.
  void forward_batch(std::span<const SequenceStep> steps);

  // A prompt spread over several forward calls: between these the cache keeps the prompt for the
  // policies that act once at its end (snapkv).
  void begin_prompt(ModelCache& cache);
  void end_prompt(ModelCache& cache);

  // When the cache's allocator reads the residual stream (MeasureSource::residual), the engine
  // hands it the residual entering each layer and after its attention add on the cache's first
  // update, and reports what it measures to the coordinator (coordinator()->measurements()).

  void set_residual_observer(ResidualObserver observer) { observer_ = std::move(observer); }

  // A prompt chunk of 16 tokens or more computes its attention logits in blocks (each head's keys
  // transposed once per layer, a block of queries as one tiled product); they equal the token
  // path's to float rounding, not to the bit. Off: every chunk takes the token path (to compare).
  // Float keys (f16, f32) only: quantized keys are read in place by the token path.
  void set_prompt_blocks(bool on) { prompt_blocks_ = on; }
  // Adds each later pass's time per operation to `profile` (null: off, the default). The profile
  // must outlive its use.
  void set_profile(OpProfile* profile) { profile_ = profile; }
  const Model& model() const { return model_; }
  ThreadPool* pool() const { return pool_; }

  // A cache shaped for this model (its layers, KV heads and head dimension; max_distance 0 becomes
  // the model's context length - 1).
  std::unique_ptr<ModelCache> make_cache(KVCacheConfig config) const;
  // The configuration make_cache gives its cache (head_dim and max_distance resolved).
  KVCacheConfig resolved_config(KVCacheConfig config) const;

 private:
  // One rope base's tables (a model has one, or one per attention kind: gemma3's global and
  // sliding layers turn at different bases).
  struct RopeTable {
    float base = 10000.0f;
    std::vector<float> by_token;  // cos/sin per token of the pass [n, n_rot]
    std::vector<float> by_rank;   // cos/sin per rank [rank_rows, n_rot]
    std::vector<float> turns;     // per shift: rotate_rows_back's table [rank_rows, 2 n_rot]
    int64_t rank_rows = 0;
  };
  // forward_batch, per sequence: its first row in the batch, its rows, the text position of its
  // first token, whether its allocator measures the residual stream in this step.
  struct SeqSpan {
    int row0, n;
    int64_t pos0;
    bool measure;
    int64_t clamp;  // span_distance of its cache, looked up once per pass
  };

  // ---- the forward pass (engine.cc)
  void check_cache(const ModelCache& cache) const;
  // The clamp of PositionRule::span for this cache (0: the rule does not apply).
  int64_t span_distance(const ModelCache& cache) const;
  // forward() over consecutive pieces of at most `piece` tokens.
  void forward_in_pieces(std::span<const int32_t> tokens, ModelCache& cache, Logits mode, std::vector<float>& logits,
                         int piece);
  void reserve(int n);
  // Layer l's attention block over the batch's n rows of x_: norm, q/k/v, each sequence's RoPE and
  // attention over its cache, output projection (and its norm), residual add.
  void attention_block(int l, std::span<const SequenceStep> steps, int n, OpTimer& timer);
  // Layer l's MLP block over n rows of x_: norm, gated MLP (and its norm), residual add.
  void mlp_block(int l, int n, OpTimer& timer);
  // The logits of the rows that want them.
  void output_logits(std::span<const SequenceStep> steps, int logit_rows);

  // ---- positions: RoPE by text position or by rank, keys turned back or clamped (engine_positions.cc)
  // Turns the queries and keys of one sequence's rows in layer l; true when by rank
  // (PositionRule::cache once the layer has evicted).
  bool rotate_queries_and_keys(int l, const SeqSpan& sp, ModelCache& cache);
  RopeTable& rope_table(int l) { return rope_tables_[size_t(layer_rope_[size_t(l)])]; }
  // Rows [0, rows) of the table's ranks (cos/sin per rank, rope_cache's arithmetic) exist.
  void ensure_rank_table(RopeTable& table, int64_t rows);
  // Head g's keys rotated back by their shifts into rot_keys_ (f32 [n_kv, ld_rows, hd]).
  void rotate_keys(const RopeTable& table, const LayerCache& layer, size_t ld_rows);
  // The keys of the rows at position 0 in the cache turned forward to clamped_at, per KV head
  // (clamp_keys_, clamp_slots_, clamp_counts_; clamp_stride_ rows per head, 0 when none).
  void patch_clamped_keys(const LayerCache& layer, int64_t clamped_at, float rope_base);

  // ---- attention over the cache (engine_attention.cc, prompt_attention.cc)
  // Attention of rows [row0, row0 + n) of q_ (one sequence) into the same rows of att_, in layer l.
  // clamped_at >= 0 (PositionRule::span): rows at positions <= clamped_at, turned to position 0
  // in the cache, are read at position clamped_at.
  void attention(int l, LayerCache& cache, int row0, int n, int64_t pos0, bool ranks, int64_t clamped_at);
  // A prompt chunk's attention in blocks (prompt_attention.cc): each head's float keys transposed
  // once per layer (quantized and KIVI keys a 64-row tile at a time per block), then a block of
  // tokens' queries against them as one register-tiled product. False (nothing done) when the
  // chunk is too short, the transposed keys or a block's logits would be too large, or quantized
  // keys are turned back by ranks (the fused token path turns them).
  bool attention_in_blocks(int l, LayerCache& layer, int row0, int n, int64_t pos0, int max_slots, bool any_rotated,
                           bool feed, size_t probs_per_head);
  // The cache wants, per KV head, [n, n_slots] probabilities summed over its query heads: token
  // t's row from its group's probabilities (group rows, ld apart), the first hi slots nonzero.
  void feed_probs(int g, int t, const float* probs, size_t ld, int hi, int n_slots, size_t probs_per_head);
  // KVzip+ (engine_output_norms.cc): fills recon_out_ with ||W_O,h v|| of each slot of the chunk
  // for each query head (0 elsewhere) and recon_qscale_ with 1 / ||x|| of rows [row0, row0 + n)
  // of xb_, the attention's input.
  void prepare_output_weighting(int l, const LayerCache& layer, int row0, int n);

  // ---- the allocator's measurement feed (engine_measure.cc)
  // Whether this cache's allocator measures the residual stream in the coming pass (its first).
  static bool measures_residual(const ModelCache& cache);
  // Hands layer l's residual before_ (entering the layer) and x_ (after the attention add) to the
  // observer and to each measuring sequence's allocator.
  void feed_residual(int l, std::span<const SequenceStep> steps);

  const Model& model_;
  ThreadPool* pool_;
  ResidualObserver observer_;
  OpProfile* profile_ = nullptr;
  int capacity_ = 0;
  // Activations, [n, ...] row-major.
  std::vector<float> x_, xb_, q_, k_, v_, att_, proj_, gate_, up_, before_;
  std::vector<float> k_heads_, v_heads_;  // [n_kv, n, hd]: the cache's update layout
  std::vector<RopeTable> rope_tables_;    // one per distinct rope base, in layer order
  std::vector<int> layer_rope_;           // per layer: its index in rope_tables_
  std::vector<int64_t> head_rank0_;       // per KV head: rows held before the update
  std::vector<float> rot_keys_;           // keys rotated back by their shifts (or clamped)
  // PositionRule::span: per KV head, the rows read at the clamped position and their turned keys.
  std::vector<float> clamp_keys_;     // [n_kv, clamp_stride_, hd]
  std::vector<int32_t> clamp_slots_;  // [n_kv, clamp_stride_]
  std::vector<size_t> clamp_counts_;  // [n_kv]
  size_t clamp_stride_ = 0;
  std::vector<float> clamp_cos_sin_;
  std::vector<uint8_t> rotated_;             // per KV head: rot_keys_ holds its keys
  std::vector<std::vector<float>> scratch_;  // per worker: a GQA group's logits over slots, mask
  std::vector<float> group_probs_;           // per KV head [n, slots] when attention is fed back
  bool prompt_blocks_ = true;
  const ReconstructionSpan* feed_span_ = nullptr;  // attention(): the layer's reconstruction, if fed
  // attention() during a reconstruction: per KV head, its slots' masks (reconstruction_masks),
  // [n_kv, 2, ld] with ld = the layer's largest n_slots.
  std::vector<float> recon_masks_;
  size_t recon_ld_ = 0;
  // KVzip+ (ReconstructionSpan::by_output): per layer, its query heads' output Gram matrices
  // (output_grams, built when first needed) and the chunk's rows' output norms [n_heads, chunk]
  // with the id of the span they were taken for (the pass's later updates read them again).
  struct ChunkOutputNorms {
    uint64_t span = 0;
    std::vector<float> norms;
  };
  std::vector<std::vector<float>> output_grams_;
  std::vector<ChunkOutputNorms> chunk_out_norms_;
  std::vector<float> recon_out_;     // [n_kv, group, recon_ld_]: per slot and query head
  std::vector<float> recon_qscale_;  // [n]: 1 / the query's hidden-state norm
  bool any_measure_ = false;         // forward_batch: some sequence measures this pass
  std::vector<float> keys_t_;        // attention_in_blocks: per KV head, keys [hd, ld] (transposed)
  std::vector<SeqSpan> spans_;       // forward_batch: per sequence
  std::vector<float> batch_logits_;  // forward_batch: every sequence's logits rows together
};

}  // namespace squeezekv
