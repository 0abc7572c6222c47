#include "squeezekv/cache/model_cache.h"

#include "cache/exclusive.h"
#include "squeezekv/alloc/head_split.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/methods/cache_parts.h"

namespace squeezekv {

ModelCache::ModelCache(const KVCacheConfig& config, int n_layers, int n_kv_heads, int n_batch,
                       std::vector<LayerKind> layer_kinds)
    : config_(config), kinds_(std::move(layer_kinds)) {
  const CacheParts parts = resolve_cache_parts(config);  // validates the config
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
    const std::shared_ptr<const BudgetAllocator>& allocator = parts.allocator;
    if (parts.ranks_globally) allocator_ = allocator;
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
      layers_.push_back(std::make_unique<LayerCache>(config, parts, i, n_kv_heads, n_batch, kind, &busy_));
    } else {
      layers_.push_back(std::make_unique<LayerCache>(config, parts, i, n_kv_heads, n_batch, budgets[size_t(i)],
                                                     coordinator_.get(), &busy_));
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
  if (allocator_) rank_globally();
  for (auto& layer : layers_) layer->end_prompt();
}

void ModelCache::begin_reconstruction(int64_t first, int64_t end) {
  for (auto& layer : layers_) layer->begin_reconstruction(first, end);
}

void ModelCache::end_reconstruction() {
  for (auto& layer : layers_) layer->end_reconstruction();
}

void ModelCache::compress() {
  Exclusive only(busy_, "compress");
  if (allocator_) rank_globally();
  for (auto& layer : layers_) layer->settle();
}

void ModelCache::rank_globally() {
  std::vector<LayerCache*> ranked;
  for (auto& layer : layers_) {
    if (!layer->sliding() && !layer->reconstruction()) ranked.push_back(layer.get());
  }
  if (ranked.empty()) return;
  const LayerCache& first = *ranked.front();
  const int n_batch = first.rows().n_batch, n_kv = first.rows().n_kv_heads;
  const int budget = first.budget_.initial;  // the uniform average every layer was built with
  std::vector<std::vector<int>> counts(ranked.size(), std::vector<int>(size_t(n_batch) * size_t(n_kv), budget));
  bool split_any = false;
  // One ranking per sequence (batch item) over every (layer, head) of it.
  for (int b = 0; b < n_batch; ++b) {
    std::vector<std::vector<float>> priorities(ranked.size() * size_t(n_kv));
    std::vector<HeadPriorities> views;
    int64_t live = 0;
    bool scored = true;
    for (size_t l = 0; l < ranked.size() && scored; ++l) {
      LayerCache& layer = *ranked[l];
      for (int h = 0; h < n_kv && scored; ++h) {
        const int head = b * n_kv + h;
        std::vector<float>& p = priorities[l * size_t(n_kv) + size_t(h)];
        scored = layer.policy_->keep_priorities(layer.rows_, head, budget, true, p);
        const HeadStore& store = layer.head(head);
        views.push_back({store.positions(), p.data(), store.n_slots()});
        live += store.n_live();
      }
    }
    const int64_t total = int64_t(budget) * n_kv * int64_t(ranked.size());
    if (!scored || live <= total) continue;  // nothing to rank by yet, or nothing to evict
    const HeadSplit split = split_heads(views, total, head_floor_rows(allocator_->head_floor(), budget));
    for (size_t l = 0; l < ranked.size(); ++l) {
      for (int h = 0; h < n_kv; ++h) {
        const size_t i = l * size_t(n_kv) + size_t(h);
        HeadStore& store = ranked[l]->rows_.heads[size_t(b * n_kv + h)];
        for (const int s : split.evict[i]) store.evict(s);
        counts[l][size_t(b * n_kv + h)] = std::max(1, split.kept[i]);
      }
    }
    split_any = true;
  }
  if (!split_any) return;
  for (size_t l = 0; l < ranked.size(); ++l) ranked[l]->pin_head_budgets(std::move(counts[l]));
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
  const CacheParts parts = resolve_cache_parts(config);  // validates the config
  validate(kind, "kind.window");
  if (kind.is_sliding()) return std::make_unique<LayerCache>(config, parts, 0, n_kv_heads, n_batch, kind);
  const int budget = parts.keeps_every_row ? kUnbounded : config.resolved_budget.value_or(config.budget);
  return std::make_unique<LayerCache>(config, parts, 0, n_kv_heads, n_batch, budget, nullptr);
}

std::unique_ptr<ModelCache> KVCacheBuilder::for_model(int n_layers, const KVCacheConfig& config, int n_kv_heads,
                                                      int n_batch, std::vector<LayerKind> layer_kinds) {
  return std::make_unique<ModelCache>(config, n_layers, n_kv_heads, n_batch, std::move(layer_kinds));
}

}  // namespace squeezekv
