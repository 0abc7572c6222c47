// ModelCache: every layer's cache of one model, sharing one coordinator when the allocator
// measures the prompt. KVCacheFactory and KVCacheBuilder keep the reference library's entry points.
//
// Each layer is global or sliding (core/layer_kind.h). The method governs the global layers alone:
// its allocator schedules them (the budget is their average; a measuring allocator measures them
// and no other), its policy evicts in them. A sliding layer holds its window.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "squeezekv/cache/coordinator.h"
#include "squeezekv/cache/conserved_schedule.h"
#include "squeezekv/cache/layer_cache.h"

namespace squeezekv {

class ModelCache {
 public:
  // layer_kinds: empty (every layer global) or one per layer (validate_layer_kinds).
  ModelCache(const KVCacheConfig& config, int n_layers, int n_kv_heads, int n_batch = 1,
             std::vector<LayerKind> layer_kinds = {});

  int n_layers() const { return int(layers_.size()); }
  LayerCache& layer(int i) { return *layers_[size_t(i)]; }
  const LayerCache& layer(int i) const { return *layers_[size_t(i)]; }
  // Null when the schedule is fixed at build time (uniform, pyramid, none).
  const BudgetCoordinator* coordinator() const { return coordinator_.get(); }
  BudgetCoordinator* coordinator() { return coordinator_.get(); }
  const KVCacheConfig& config() const { return config_; }
  // One per layer (every layer global when none were given).
  const std::vector<LayerKind>& layer_kinds() const { return kinds_; }
  int n_sliding() const;

  void begin_prompt();
  // Ends the prompt: each layer's policy chooses (snapkv, kvzip), after the ranking across layers
  // when the allocator ranks globally.
  void end_prompt();
  void reset();

  // Context reconstruction over every layer (LayerCache::begin_reconstruction): the chunk
  // [first, end) of the positions seen; the reconstruction's rows leave at its end.
  void begin_reconstruction(int64_t first, int64_t end);
  void end_reconstruction();
  // Compresses now, inside a prompt (streaming reconstruction): every layer's policy evicts what it
  // has scored down to its budget, after the ranking across layers when the allocator ranks
  // globally.
  void compress();

  // Per layer: the rows per head it trims to now (conserved; a sliding layer's window) and what
  // its allocator scheduled; they differ while some layer is scheduled more rows than it can hold.
  std::vector<int> budgets() const;
  std::vector<int> scheduled_budgets() const;
  size_t kept_bytes() const;  // sliding_kept_bytes() + evicting_kept_bytes()
  size_t sliding_kept_bytes() const;
  size_t evicting_kept_bytes() const;
  size_t full_bytes() const;
  double compression_ratio() const;

  // ---- saving (cache/cache_state.cc; engine/cache_file.h puts the state in a file with the
  // configuration and the model's identity) ----
  // The whole state: the shapes, the coordinator's measurements and schedule, every layer's
  // (heads, budgets, the policy's own state). A cache built with the same configuration, shapes
  // and layer kinds that loads it continues exactly as this one would. Between updates only.
  void save_state(StateWriter& out) const;
  // Into a cache that has seen nothing (InvalidArgument otherwise). Every check happens as the
  // state is read; on any failure (FormatError naming what does not hold, InvalidArgument for
  // another shape) the cache is reset to the empty cache it was, never left half loaded.
  void load_state(StateReader& in);

 private:
  KVCacheConfig config_;
  std::vector<LayerKind> kinds_;
  std::unique_ptr<BudgetCoordinator> coordinator_;
  // The layers' schedule, conserved as they fill: fixed at build (no coordinator), or the
  // coordinator's once it publishes.
  ConservedSchedule schedule_;
  std::vector<std::unique_ptr<LayerCache>> layers_;
  std::atomic<bool> busy_{false};                     // the single-writer flag every layer shares (layer_cache.h)
  std::shared_ptr<const BudgetAllocator> allocator_;  // null when every layer slides
  // The allocator ranks globally: one ranking of every evicting layer's rows by the policy's keep
  // priorities shares their rows (the uniform budget's total) among layers and heads, each head
  // keeping at least the allocator's floor, and pins each head to its count.
  void rank_globally();
};

// The reference library's KVCacheFactory.create: one layer, no coordinator — a uniform layer with the average
// budget, or resolved_budget when set; or, given a sliding kind, a sliding layer over its window.
struct KVCacheFactory {
  static std::unique_ptr<LayerCache> create(const KVCacheConfig& config, int n_kv_heads = 1, int n_batch = 1,
                                            LayerKind kind = {});
};

// The reference library's KVCacheBuilder.for_model: a whole model's caches with one shared coordinator.
struct KVCacheBuilder {
  static std::unique_ptr<ModelCache> for_model(int n_layers, const KVCacheConfig& config, int n_kv_heads = 1,
                                               int n_batch = 1, std::vector<LayerKind> layer_kinds = {});
};

}  // namespace squeezekv
