// LayerCache: one attention layer's evicting KV cache (batch x KV heads independent heads).
//
// Engine protocol for one forward step of a layer (n new tokens, head-major [heads, n, D] f32):
//   begin_update(k, v, n)     rows stored, key-proxy scores updated; may exceed the budget
//   head(h)                   attend over slots [0, n_slots) with position <= the query's
//   add_attention(h, p, n)    only when wants_attention(): the probabilities, for scoring
//   end_update()              evict down to the budget
// update() does all three for callers without attention of their own (the reference library's API).
//
// A cache is single-writer: update, fetch, reset and the prompt calls of one cache (every layer of
// a model cache together, since a publish trims them all) must not overlap. Overlapping calls are
// detected and the later one throws InvalidArgument; nothing is corrupted. Callers that share a
// cache between threads serialise it themselves (the Python module does). Two exceptions, for the
// caller's own worker threads inside one update: add_attention for different heads may run at once
// when policy().heads_independent(), and begin_update / end_update given a pool run their per-head
// work on it (each head alone; the result is the same bits as without a pool).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "squeezekv/core/layer_kind.h"
#include "squeezekv/core/layer_rows.h"
#include "squeezekv/methods/cache_parts.h"
#include "squeezekv/methods/kv_cache_config.h"
#include "squeezekv/policy/token_policy.h"

namespace squeezekv {

class BudgetCoordinator;
class ConservedSchedule;
class ThreadPool;

// Far beyond any GGUF model (the largest have ~128 layers and heads), low enough that a wrong
// count fails before anything is allocated.
inline constexpr int kMaxCacheLayers = 4096;
inline constexpr int kMaxCacheHeads = 4096;
inline constexpr int kMaxCacheBatch = 4096;
inline constexpr int64_t kMaxCacheHeadStores = int64_t(1) << 20;
// When a layer's per-head work goes to a pool (a hand-off costs about 1-2 us; below these, one
// thread is faster): eviction from this many slots over all heads, storing from this many values
// (rows x head_dim over all heads: a prompt chunk, never a decode step's few rows).
inline constexpr int64_t kParallelHeadSlots = 2048;
inline constexpr int64_t kParallelHeadValues = 16384;

// A read-only, contiguous [batch, heads, seq, head_dim] block of f32 (the reference library's tensor shape).
struct KVBlockView {
  const float* data = nullptr;
  int batch = 1;
  int heads = 1;
  int seq = 0;
  int head_dim = 0;
};

// Rows of one head in position order, f32 (what update_and_fetch returns).
struct FetchedRows {
  std::vector<float> keys;    // [n, head_dim]
  std::vector<float> values;  // [n, head_dim]
  std::vector<int64_t> positions;
};

// Where a layer's budget comes from. A layer of a model cache with a measuring allocator starts
// measuring, one with a fixed schedule starts scheduled; a lone or sliding layer has its own.
enum class BudgetPhase : uint8_t {
  measuring,  // a coordinator measures the prompt: every row is kept until it publishes
  scheduled,  // the model cache's schedule, conserved as the layers fill (budget_at)
  own,        // kept as given: set_budget's, a lone layer's, a sliding layer's window
  pinned,     // each head its own count, from one ranking across layers (pin_head_budgets)
};

// Where a layer stands in its prompt: policies that choose once at its end (snapkv, kvzip) do so
// when a settle finds it ending.
enum class PromptPhase : uint8_t {
  unseen,  // no begin_prompt: the next update is the prompt
  open,    // begin_prompt() called before any update, end_prompt() not yet
  ending,  // ended; the next settle applies the policy's finish_prompt
  done,
};

// A layer's budget: its phase says which value governs.
struct LayerBudget {
  BudgetPhase phase = BudgetPhase::own;
  int initial = 1;            // the fallback until a coordinator publishes, and after a pinned layer's reset
  int scheduled = 1;          // what the allocator scheduled, set_budget set, or the pinned heads' average
  int now = 1;                // conserved: what settle trims to
  std::vector<int> per_head;  // from the last head split or the pin (empty: none yet)
  bool final() const { return phase != BudgetPhase::measuring; }
};

class LayerCache {
 public:
  // An evicting layer of `parts` (methods/cache_parts.h: its policy, storage and head split, all
  // resolved from `config`). `budget` is the layer's rows per head until a coordinator publishes
  // the final schedule; with a coordinator the layer keeps every row until then.
  LayerCache(const KVCacheConfig& config, const CacheParts& parts, int layer_index, int n_kv_heads, int n_batch,
             int budget, BudgetCoordinator* coordinator, std::atomic<bool>* shared_busy = nullptr);
  // A sliding layer (core/layer_kind.h): after every update each head holds exactly the newest
  // min(tokens_seen, window) positions. No policy runs and no coordinator schedules it; its
  // budget is the window, final from the start. During an update it also holds the update's rows
  // and the window before them: the engine masks each query to its own window (a key at position
  // p is seen by a query at q when q - window < p <= q).
  LayerCache(const KVCacheConfig& config, const CacheParts& parts, int layer_index, int n_kv_heads, int n_batch,
             LayerKind window_kind, std::atomic<bool>* shared_busy = nullptr);
  LayerCache(const LayerCache&) = delete;
  LayerCache& operator=(const LayerCache&) = delete;

  // ---- engine API ----
  // pool (optional, the caller's): storing each head's rows, and evicting per head when the
  // policy's heads are independent, run on it (a run of heads per worker) when there is enough
  // work to pay for the hand-off (kParallelHeadSlots, kParallelHeadValues).
  void begin_update(const float* keys, const float* values, int n_tokens, ThreadPool* pool = nullptr);
  const HeadStore& head(int h) const { return rows_.heads[size_t(h)]; }
  int n_heads() const { return int(rows_.heads.size()); }
  // During a reconstruction, the policies that score by it want its attention (fed to
  // score_reconstruction); otherwise the policy says.
  bool wants_attention() const {
    return rows_.reconstruction ? policy_->scores_reconstruction() : policy_->wants_attention();
  }
  void add_attention(int h, const float* probs, int n_queries);
  // The update's queries before RoPE, for a policy that reads them (TokenPolicy::wants_queries);
  // not during a reconstruction, whose queries are no prompt's.
  bool wants_queries() const { return !rows_.reconstruction && policy_->wants_queries(); }
  void add_queries(const UpdateQueries& queries);
  // PositionRule::span: every head's keys at positions <= upto turned to RoPE position 0, once
  // each (HeadStore::rotate_keys_to_origin); called between begin_update and end_update.
  void rotate_keys_to_origin(int64_t upto, int64_t n_rot, RopeStyle style, float rope_base);
  void end_update(ThreadPool* pool = nullptr);

  // ---- seed-style API ----
  void update(const float* keys, const float* values, int n_tokens);  // [heads, n, D]
  void update(const KVBlockView& keys, const KVBlockView& values);    // checks the shapes
  FetchedRows fetch(int h) const;

  // A prompt spread over several updates (chunked prefill): policies that act once at the end of
  // the prompt (snapkv) wait for end_prompt(). Without begin_prompt the first update is the prompt.
  void begin_prompt();
  void end_prompt();

  // Context reconstruction (KVzip): rows appended from begin_reconstruction on are the
  // reconstruction's; end_reconstruction evicts them and the cache stands where it stood, its
  // tokens_seen included. Meanwhile nothing is evicted (a sliding layer holds its window and those
  // rows; the engine masks each query to its window) and, when the policy scores by reconstruction,
  // the attention fed back goes to score_reconstruction. [first, end): the chunk reconstructed.
  void begin_reconstruction(int64_t first, int64_t end);
  void end_reconstruction();
  // The reconstruction under way, null when none.
  const ReconstructionSpan* reconstruction() const { return rows_.reconstruction ? &*rows_.reconstruction : nullptr; }

  // Sets this layer's budget and trims to it now. A coordinator's schedule is conserved as the
  // layer fills (budget_at); a budget set here is the layer's own, kept as given.
  void set_budget(int budget);
  void reset();

  // ---- accounting ----
  int layer_index() const { return layer_index_; }
  const LayerKind& kind() const { return kind_; }
  bool sliding() const { return kind_.is_sliding(); }
  // The rows per head this layer trims to now: its scheduled budget conserved to what the layers
  // can hold (alloc/conserve_budgets.h), the schedule itself once the layers have seen enough.
  int layer_budget() const { return budget_.now; }
  // What the allocator scheduled (or set_budget set) for this layer.
  int scheduled_budget() const { return budget_.scheduled; }
  bool budget_final() const { return budget_.final(); }
  BudgetPhase budget_phase() const { return budget_.phase; }
  PromptPhase prompt_phase() const { return prompt_; }
  // The key measurement of a measuring allocator that reads keys (the squeeze allocator's key
  // concentration); 0 when the layer's allocator measures nothing from keys.
  double concentration() const { return concentration_; }
  int64_t tokens_seen() const { return rows_.tokens_seen; }
  int tokens_kept() const;  // rows held by the fullest head
  // Rows held per head on average, rounded up: what the layer's budget promises. Equal to
  // tokens_kept() unless the head split (adakv) gives the heads different shares.
  int rows_per_head() const;
  int tokens_kept(int h) const { return head(h).n_live(); }
  HeadSplitRule head_split() const { return split_; }
  size_t kept_bytes() const;         // K and V bytes resident (allocated slots)
  size_t full_bytes() const;         // what an unevicted cache would hold (sliding: the window's rows)
  double compression_ratio() const;  // full / kept, 1 when nothing is kept
  const KVCacheConfig& config() const { return config_; }
  const TokenPolicy& policy() const { return *policy_; }
  const LayerRows& rows() const { return rows_; }

  // ---- saving (cache/cache_state.cc; ModelCache::save_state calls them for every layer) ----
  // Everything this layer decides from next: its budgets, prompt flags, measurement, heads and its
  // policy's own state. Between updates only (InvalidArgument during one).
  void save_state(StateWriter& out) const;

 private:
  // Every constructor ends here, with the policy already made (the parts', or the sliding window's).
  LayerCache(const KVCacheConfig& config, const StorageParams& storage, HeadSplitRule split, int layer_index,
             int n_kv_heads, int n_batch, int budget, std::unique_ptr<TokenPolicy> policy,
             BudgetCoordinator* coordinator, std::atomic<bool>* shared_busy);
  void load_state(StateReader& in);  // into a layer that has seen nothing (ModelCache::load_state)
  friend class ModelCache;
  void clear();  // reset without the single-writer check (ModelCache::reset holds it)
  void check_finite(const float* data, size_t n, const char* what) const;
  void settle(ThreadPool* pool = nullptr);            // evict / finish the prompt once the budget is final
  void apply_budget(int budget, bool scheduled);      // set_budget, or the coordinator's publish
  bool ages_rows() const;                             // rows past max_distance go (span rule)
  int budget_at(int64_t tokens);                      // the conserved budget after `tokens` tokens
  void follow_schedule(ConservedSchedule* schedule);  // the model cache's schedule
  // The head split's eviction (head_split adakv): each sequence's rows shared among its heads by
  // the policy's keep priorities (alloc/head_split.h), else each head to the count it holds.
  void settle_split(ThreadPool* pool, bool prompt_end, bool worth_it);
  // After the policy: shifts, capacity (for `budget` rows, the head's own), KIVI.
  void settle_head(HeadStore& head, bool prompt_end, int budget);
  // Each head's rows from now on, chosen across layers (an allocator that ranks_globally): the
  // rows beyond each count were evicted by the caller; later evictions keep every head to its own.
  void pin_head_budgets(std::vector<int> counts);
  // Head h's rows: its share from the last split, else the layer's (conserved) budget.
  int head_budget(size_t h) const { return budget_.per_head.empty() ? budget_.now : budget_.per_head[h]; }
  // PositionRule::span: every non-sink row of `head` at a position below `before` goes.
  void evict_aged(HeadStore& head, int64_t before) const;
  // fn(h) for every head: on the pool when one is given and the work is worth a hand-off, else
  // in order on this thread.
  template <class Fn>
  void for_each_head(ThreadPool* pool, bool worth_it, const Fn& fn);
  int64_t total_slots() const;  // over every head
  // Keys or values in a grouped format (KIVI): storing and settling cost more (regrouping).
  bool grouped_storage() const { return kv_kivi(storage_.key) || kv_kivi(storage_.value); }

  KVCacheConfig config_;
  int layer_index_;
  LayerKind kind_{};
  LayerBudget budget_;
  ConservedSchedule* schedule_ = nullptr;  // the model cache's (fixed, or the coordinator's once final)
  std::unique_ptr<TokenPolicy> policy_;
  HeadSplitRule split_ = HeadSplitRule::uniform;
  std::vector<std::vector<float>> priorities_;  // per head: the split's scratch
  BudgetCoordinator* coordinator_;
  LayerRows rows_;
  UpdateRows update_;
  StorageParams storage_;  // the formats of keys and values (resolved: the parts')
  double concentration_ = 0.0;
  bool in_update_ = false;
  bool stored_any_ = false;  // an update has stored rows since the last reset (the first measures keys)
  PromptPhase prompt_ = PromptPhase::unseen;
  std::atomic<bool> own_busy_{false};
  std::atomic<bool>* busy_;  // set while a call runs: own_busy_ or the model cache's flag
};

}  // namespace squeezekv
