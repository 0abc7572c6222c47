#include "squeezekv/cache/model_cache.h"

#include "cache/exclusive.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv {

ModelCache::ModelCache(const KVCacheConfig& config, int n_layers, int n_kv_heads, int n_batch)
    : config_(config) {
  config.validate();
  require(n_layers >= 1 && n_layers <= kMaxCacheLayers, "n_layers", n_layers,
          "must lie in [1, " + std::to_string(kMaxCacheLayers) + "]");
  require(n_kv_heads >= 1 && n_kv_heads <= kMaxCacheHeads, "n_kv_heads", n_kv_heads,
          "must lie in [1, " + std::to_string(kMaxCacheHeads) + "]");
  require(n_batch >= 1 && n_batch <= kMaxCacheBatch, "n_batch", n_batch,
          "must lie in [1, " + std::to_string(kMaxCacheBatch) + "]");
  // Checked before anything is allocated: every (layer, batch, head) is one row store.
  const int64_t stores = int64_t(n_layers) * n_kv_heads * n_batch;
  require(stores <= kMaxCacheHeadStores, "n_layers * n_kv_heads * n_batch", stores,
          "at most " + std::to_string(kMaxCacheHeadStores) + " heads in one model cache");
  std::shared_ptr<const BudgetAllocator> allocator = make_allocator(config);
  std::vector<int> budgets;
  if (allocator->source() != MeasureSource::none) {
    coordinator_ = std::make_unique<BudgetCoordinator>(n_layers, allocator);
    budgets.assign(size_t(n_layers), config.budget);  // the fallback until the schedule is final
  } else {
    budgets = allocator->allocate(n_layers, {}, 0);
  }
  for (int i = 0; i < n_layers; ++i) {
    layers_.push_back(std::make_unique<LayerCache>(config, i, n_kv_heads, n_batch,
                                                   budgets[size_t(i)],
                                                   make_token_policy(config), coordinator_.get(),
                                                   &busy_));
  }
}

void ModelCache::begin_prompt() {
  for (auto& layer : layers_) layer->begin_prompt();
}

void ModelCache::end_prompt() {
  for (auto& layer : layers_) layer->end_prompt();
}

void ModelCache::reset() {
  Exclusive only(busy_, "reset");
  if (coordinator_) coordinator_->reset();  // first, so that every layer falls back and re-measures
  for (auto& layer : layers_) layer->clear();
}

std::vector<int> ModelCache::budgets() const {
  std::vector<int> out;
  for (const auto& layer : layers_) out.push_back(layer->layer_budget());
  return out;
}

size_t ModelCache::kept_bytes() const {
  size_t bytes = 0;
  for (const auto& layer : layers_) bytes += layer->kept_bytes();
  return bytes;
}

size_t ModelCache::full_bytes() const {
  size_t bytes = 0;
  for (const auto& layer : layers_) bytes += layer->full_bytes();
  return bytes;
}

double ModelCache::compression_ratio() const {
  const size_t kept = kept_bytes();
  return kept == 0 ? 1.0 : double(full_bytes()) / double(kept);
}

std::unique_ptr<LayerCache> KVCacheFactory::create(const KVCacheConfig& config, int n_kv_heads,
                                                   int n_batch) {
  config.validate();
  const int budget = keeps_every_row(config) ? kUnbounded : config.resolved_budget.value_or(config.budget);
  return std::make_unique<LayerCache>(config, 0, n_kv_heads, n_batch, budget, make_token_policy(config), nullptr);
}

std::unique_ptr<ModelCache> KVCacheBuilder::for_model(int n_layers, const KVCacheConfig& config,
                                                      int n_kv_heads, int n_batch) {
  return std::make_unique<ModelCache>(config, n_layers, n_kv_heads, n_batch);
}

}  // namespace squeezekv
