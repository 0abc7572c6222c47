// ModelCache: every layer's cache of one model, sharing one coordinator when the allocator
// measures the prompt. KVCacheFactory and KVCacheBuilder keep the reference library's entry points.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "squeezekv/cache/coordinator.h"
#include "squeezekv/cache/layer_cache.h"

namespace squeezekv {

class ModelCache {
 public:
  ModelCache(const KVCacheConfig& config, int n_layers, int n_kv_heads, int n_batch = 1);

  int n_layers() const { return int(layers_.size()); }
  LayerCache& layer(int i) { return *layers_[size_t(i)]; }
  const LayerCache& layer(int i) const { return *layers_[size_t(i)]; }
  // Null when the schedule is fixed at build time (uniform, pyramid, none).
  const BudgetCoordinator* coordinator() const { return coordinator_.get(); }
  BudgetCoordinator* coordinator() { return coordinator_.get(); }
  const KVCacheConfig& config() const { return config_; }

  void begin_prompt();
  void end_prompt();
  void reset();

  std::vector<int> budgets() const;
  size_t kept_bytes() const;
  size_t full_bytes() const;
  double compression_ratio() const;

 private:
  KVCacheConfig config_;
  std::unique_ptr<BudgetCoordinator> coordinator_;
  std::vector<std::unique_ptr<LayerCache>> layers_;
  std::atomic<bool> busy_{false};  // the single-writer flag every layer shares (layer_cache.h)
};

// The reference library's KVCacheFactory.create: one layer, no coordinator — a uniform layer with the average
// budget, or resolved_budget when set.
struct KVCacheFactory {
  static std::unique_ptr<LayerCache> create(const KVCacheConfig& config, int n_kv_heads = 1,
                                            int n_batch = 1);
};

// The reference library's KVCacheBuilder.for_model: a whole model's caches with one shared coordinator.
struct KVCacheBuilder {
  static std::unique_ptr<ModelCache> for_model(int n_layers, const KVCacheConfig& config,
                                               int n_kv_heads = 1, int n_batch = 1);
};

}  // namespace squeezekv
