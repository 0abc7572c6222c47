#include "squeezekv/cache/model_cache.h"

#include "cache/exclusive.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv {

ModelCache::ModelCache(const KVCacheConfig& config, int n_layers, int n_kv_heads, int n_batch,
                       std::vector<LayerKind> layer_kinds)
    : config_(config), kinds_(std::move(layer_kinds)) {
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
  validate_layer_kinds(kinds_, n_layers);
  if (kinds_.empty()) kinds_.assign(size_t(n_layers), LayerKind::global());
  std::vector<bool> evicting;
  int n_evicting = 0;
  for (const LayerKind& kind : kinds_) {
    evicting.push_back(!kind.is_sliding());
    n_evicting += kind.is_sliding() ? 0 : 1;
  }
  // The allocator schedules the evicting layers alone, in layer order (a model of sliding layers
  // only has no schedule at all).
  std::vector<int> budgets(size_t(n_layers), 0);
  if (n_evicting > 0) {
    std::shared_ptr<const BudgetAllocator> allocator = make_allocator(config);
    std::vector<int> schedule;
    if (allocator->source() != MeasureSource::none) {
      coordinator_ = std::make_unique<BudgetCoordinator>(n_layers, allocator, evicting);
      schedule.assign(size_t(n_evicting), config.budget);  // the fallback until the schedule is final
    } else {
      schedule = allocator->allocate(n_evicting, {}, 0);
    }
    for (size_t i = 0, k = 0; i < budgets.size(); ++i) {
      if (evicting[i]) budgets[i] = schedule[k++];
    }
  }
  for (int i = 0; i < n_layers; ++i) {
    const LayerKind& kind = kinds_[size_t(i)];
    if (kind.is_sliding()) {
      layers_.push_back(std::make_unique<LayerCache>(config, i, n_kv_heads, n_batch, kind, &busy_));
    } else {
      layers_.push_back(std::make_unique<LayerCache>(config, i, n_kv_heads, n_batch, budgets[size_t(i)],
                                                     make_token_policy(config), coordinator_.get(), &busy_));
    }
  }
  // One schedule, conserved as the layers fill: a fixed one (uniform, pyramid) from now, a measured
  // one from when the coordinator publishes it (before any layer applies its budget).
  if (n_evicting > 0) {
    if (coordinator_) {
      coordinator_->on_schedule([this, evicting](const std::vector<int>& b) { schedule_.set(b, evicting); });
    } else {
      schedule_.set(budgets, evicting);
    }
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (evicting[i]) layers_[i]->follow_schedule(&schedule_);
    }
  }
}

int ModelCache::n_sliding() const {
  int n = 0;
  for (const LayerKind& kind : kinds_) n += kind.is_sliding() ? 1 : 0;
  return n;
}

void ModelCache::begin_prompt() {
  for (auto& layer : layers_) layer->begin_prompt();
}

void ModelCache::end_prompt() {
  for (auto& layer : layers_) layer->end_prompt();
}

void ModelCache::reset() {
  Exclusive only(busy_, "reset");
  if (coordinator_) {
    coordinator_->reset();  // first, so that every layer falls back and re-measures
    schedule_.clear();
  }
  for (auto& layer : layers_) layer->clear();
}

std::vector<int> ModelCache::budgets() const {
  std::vector<int> out;
  for (const auto& layer : layers_) out.push_back(layer->layer_budget());
  return out;
}

std::vector<int> ModelCache::scheduled_budgets() const {
  std::vector<int> out;
  for (const auto& layer : layers_) out.push_back(layer->scheduled_budget());
  return out;
}

size_t ModelCache::kept_bytes() const {
  size_t bytes = 0;
  for (const auto& layer : layers_) bytes += layer->kept_bytes();
  return bytes;
}

size_t ModelCache::sliding_kept_bytes() const {
  size_t bytes = 0;
  for (const auto& layer : layers_) bytes += layer->sliding() ? layer->kept_bytes() : 0;
  return bytes;
}

size_t ModelCache::evicting_kept_bytes() const {
  size_t bytes = 0;
  for (const auto& layer : layers_) bytes += layer->sliding() ? 0 : layer->kept_bytes();
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

std::unique_ptr<LayerCache> KVCacheFactory::create(const KVCacheConfig& config, int n_kv_heads, int n_batch,
                                                   LayerKind kind) {
  config.validate();
  validate(kind, "kind.window");
  if (kind.is_sliding()) return std::make_unique<LayerCache>(config, 0, n_kv_heads, n_batch, kind);
  const int budget = keeps_every_row(config) ? kUnbounded : config.resolved_budget.value_or(config.budget);
  return std::make_unique<LayerCache>(config, 0, n_kv_heads, n_batch, budget, make_token_policy(config), nullptr);
}

std::unique_ptr<ModelCache> KVCacheBuilder::for_model(int n_layers, const KVCacheConfig& config, int n_kv_heads,
                                                      int n_batch, std::vector<LayerKind> layer_kinds) {
  return std::make_unique<ModelCache>(config, n_layers, n_kv_heads, n_batch, std::move(layer_kinds));
}

}  // namespace squeezekv
