// The cache half of the C API: parameters by name (the registry's), building caches, updates, reading
// rows, budgets and accounting.
#include <algorithm>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "capi/capi_cache.h"
#include "capi/capi_status.h"
#include "squeezekv/methods/registry.h"
#include "squeezekv/ops/kv_rows.h"

using squeezekv::capi::guarded;
using squeezekv::capi::guarded_count;
using squeezekv::capi::require_handle;

squeezekv::LayerCache& squeezekv_cache::layer(int32_t l) {
  return const_cast<squeezekv::LayerCache&>(std::as_const(*this).layer(l));
}

const squeezekv::LayerCache& squeezekv_cache::layer(int32_t l) const {
  squeezekv::require(l >= 0 && l < n_layers(), "layer", l, "out of range [0, " + std::to_string(n_layers()) + ")");
  return model ? model->layer(l) : *single;
}

namespace squeezekv::capi {
namespace {

void check_head(const LayerCache& layer, int32_t head) {
  require(head >= 0 && head < layer.n_heads(), "head", head,
          "out of range [0, " + std::to_string(layer.n_heads()) + ")");
}

// Copies the rows of `slots` (f32 out); a free slot gives zero rows and position -1.
int32_t copy_rows(const HeadStore& store, const std::vector<int>& slots, float* keys, float* values, int64_t* positions,
                  int32_t capacity) {
  const auto n = int32_t(slots.size());
  if (capacity < n) return -n;
  const size_t dim = size_t(store.head_dim());
  for (size_t i = 0; i < slots.size(); ++i) {
    const int s = slots[i];
    const bool live = store.live(s);
    if (keys) {
      if (live) store.load_key(s, keys + i * dim);
      else std::fill_n(keys + i * dim, dim, 0.0f);
    }
    if (values) {
      if (live) store.load_value(s, values + i * dim);
      else std::fill_n(values + i * dim, dim, 0.0f);
    }
    if (positions) positions[i] = store.positions()[s];
  }
  return n;
}

}  // namespace

void require_rows(const float* keys, const float* values) {
  require(keys != nullptr, "keys", "NULL", "a block of keys [n_batch, n_kv_heads, n_tokens, head_dim] is required");
  require(values != nullptr, "values", "NULL",
          "a block of values [n_batch, n_kv_heads, n_tokens, head_dim] is required");
}

const KVCacheConfig& to_config(const squeezekv_cache_params* params) {
  const KVCacheConfig& c = require_handle(params, "params").config;
  c.validate();
  return c;
}

}  // namespace squeezekv::capi

extern "C" {

squeezekv_cache_params* squeezekv_cache_params_new(void) { return new (std::nothrow) squeezekv_cache_params{}; }

squeezekv_cache_params* squeezekv_cache_params_copy(const squeezekv_cache_params* params) {
  squeezekv_cache_params* out = nullptr;
  guarded(__func__, [&] { out = new squeezekv_cache_params(require_handle(params, "params")); });
  return out;
}

void squeezekv_cache_params_free(squeezekv_cache_params* params) { delete params; }

squeezekv_status squeezekv_cache_params_set(squeezekv_cache_params* params, const char* name, const char* value) {
  return guarded(__func__, [&] {
    squeezekv::require(name != nullptr, "name", "NULL", "a parameter name is required");
    squeezekv::require(value != nullptr, name, "NULL", "a value is required");
    squeezekv::KVCacheConfig c = require_handle(params, "params").config;
    c.set(name, value);  // on a copy: a refused value leaves the configuration unchanged
    params->config = std::move(c);
  });
}

squeezekv_status squeezekv_cache_params_set_int(squeezekv_cache_params* params, const char* name, int64_t value) {
  return guarded(__func__, [&] {
    squeezekv::require(name != nullptr, "name", "NULL", "a parameter name is required");
    squeezekv::KVCacheConfig c = require_handle(params, "params").config;
    c.set(name, squeezekv::ParamValue(value));
    params->config = std::move(c);
  });
}

squeezekv_status squeezekv_cache_params_set_double(squeezekv_cache_params* params, const char* name, double value) {
  return guarded(__func__, [&] {
    squeezekv::require(name != nullptr, "name", "NULL", "a parameter name is required");
    squeezekv::KVCacheConfig c = require_handle(params, "params").config;
    c.set(name, squeezekv::ParamValue(value));
    params->config = std::move(c);
  });
}

int32_t squeezekv_cache_params_get(const squeezekv_cache_params* params, const char* name, char* buf,
                                   int32_t capacity) {
  return guarded_count(__func__, [&]() -> int32_t {
    squeezekv::require(name != nullptr, "name", "NULL", "a parameter name is required");
    const std::string text = require_handle(params, "params").config.get_text(name);
    const auto n = int32_t(text.size());
    if (buf == nullptr || capacity < n + 1) return -(n + 1);
    std::memcpy(buf, text.c_str(), text.size() + 1);
    return n;
  });
}

squeezekv_status squeezekv_cache_params_validate(const squeezekv_cache_params* params) {
  return guarded(__func__, [&] { squeezekv::capi::to_config(params); });
}

int32_t squeezekv_param_count(void) { return int32_t(squeezekv::all_params().size()); }

namespace {
// The registry's strings are literals, so data() is NUL-terminated.
const squeezekv::ParamSpec* param_at(int32_t i) {
  const std::vector<const squeezekv::ParamSpec*>& params = squeezekv::all_params();
  return i >= 0 && size_t(i) < params.size() ? params[size_t(i)] : nullptr;
}
}  // namespace

const char* squeezekv_param_name(int32_t i) {
  const auto* p = param_at(i);
  return p ? p->name.data() : nullptr;
}

const char* squeezekv_param_default(int32_t i) {
  const auto* p = param_at(i);
  return p ? p->default_value.data() : nullptr;
}

const char* squeezekv_param_help(int32_t i) {
  const auto* p = param_at(i);
  return p ? p->help.data() : nullptr;
}

int32_t squeezekv_method_count(void) { return int32_t(squeezekv::all_methods().size()); }

const char* squeezekv_method_id(int32_t i) {
  const auto methods = squeezekv::all_methods();
  // The registry's ids are string literals, so data() is NUL-terminated.
  return i >= 0 && size_t(i) < methods.size() ? methods[size_t(i)].id.data() : nullptr;
}

squeezekv_cache* squeezekv_cache_init(const squeezekv_cache_params* params, int32_t n_layers, int32_t n_kv_heads,
                                      int32_t n_batch) {
  squeezekv_cache* out = nullptr;
  guarded(__func__, [&] {
    squeezekv::require(n_kv_heads >= 1, "n_kv_heads", n_kv_heads, "must be >= 1");
    squeezekv::require(n_batch >= 1, "n_batch", n_batch, "must be >= 1");
    auto cache = std::make_unique<squeezekv_cache>();
    cache->model =
        squeezekv::KVCacheBuilder::for_model(n_layers, squeezekv::capi::to_config(params), n_kv_heads, n_batch);
    out = cache.release();
  });
  return out;
}

squeezekv_cache* squeezekv_cache_init_sliding(const squeezekv_cache_params* params, int32_t n_layers,
                                              int32_t n_kv_heads, int32_t n_batch, const int32_t* sliding_windows) {
  squeezekv_cache* out = nullptr;
  guarded(__func__, [&] {
    squeezekv::require(n_layers >= 1 && n_layers <= squeezekv::kMaxCacheLayers, "n_layers", n_layers,
                       "must lie in [1, " + std::to_string(squeezekv::kMaxCacheLayers) + "]");
    squeezekv::require(n_kv_heads >= 1, "n_kv_heads", n_kv_heads, "must be >= 1");
    squeezekv::require(n_batch >= 1, "n_batch", n_batch, "must be >= 1");
    std::vector<squeezekv::LayerKind> kinds;
    if (sliding_windows != nullptr) {
      kinds = squeezekv::layer_kinds_from_windows(std::span(sliding_windows, size_t(n_layers)), n_layers);
    }
    auto cache = std::make_unique<squeezekv_cache>();
    cache->model = squeezekv::KVCacheBuilder::for_model(n_layers, squeezekv::capi::to_config(params), n_kv_heads,
                                                        n_batch, std::move(kinds));
    out = cache.release();
  });
  return out;
}

squeezekv_cache* squeezekv_cache_init_layer(const squeezekv_cache_params* params, int32_t n_kv_heads, int32_t n_batch) {
  squeezekv_cache* out = nullptr;
  guarded(__func__, [&] {
    squeezekv::require(n_kv_heads >= 1, "n_kv_heads", n_kv_heads, "must be >= 1");
    squeezekv::require(n_batch >= 1, "n_batch", n_batch, "must be >= 1");
    auto cache = std::make_unique<squeezekv_cache>();
    cache->single = squeezekv::KVCacheFactory::create(squeezekv::capi::to_config(params), n_kv_heads, n_batch);
    out = cache.release();
  });
  return out;
}

void squeezekv_cache_free(squeezekv_cache* cache) { delete cache; }

int32_t squeezekv_cache_n_layers(const squeezekv_cache* cache) { return cache ? cache->n_layers() : 0; }

int32_t squeezekv_cache_n_heads(const squeezekv_cache* cache) {
  return guarded_count(__func__, [&] { return require_handle(cache, "cache").layer(0).n_heads(); });
}

int32_t squeezekv_cache_head_dim(const squeezekv_cache* cache) {
  return guarded_count(__func__, [&] { return require_handle(cache, "cache").layer(0).config().head_dim; });
}

squeezekv_status squeezekv_cache_update(squeezekv_cache* cache, int32_t layer, const float* keys, const float* values,
                                        int32_t n_tokens) {
  return guarded(__func__, [&] {
    require_handle(cache, "cache");
    squeezekv::capi::require_rows(keys, values);
    cache->layer(layer).update(keys, values, n_tokens);
  });
}

squeezekv_status squeezekv_cache_begin_update(squeezekv_cache* cache, int32_t layer, const float* keys,
                                              const float* values, int32_t n_tokens) {
  return guarded(__func__, [&] {
    require_handle(cache, "cache");
    squeezekv::capi::require_rows(keys, values);
    cache->layer(layer).begin_update(keys, values, n_tokens);
  });
}

bool squeezekv_cache_wants_attention(const squeezekv_cache* cache, int32_t layer) {
  bool wants = false;
  guarded(__func__, [&] { wants = require_handle(cache, "cache").layer(layer).wants_attention(); });
  return wants;
}

squeezekv_status squeezekv_cache_add_attention(squeezekv_cache* cache, int32_t layer, int32_t head, const float* probs,
                                               int32_t n_queries) {
  return guarded(__func__, [&] {
    require_handle(cache, "cache");
    squeezekv::require(probs != nullptr || n_queries == 0, "probs", "NULL", "required when n_queries > 0");
    cache->layer(layer).add_attention(head, probs, n_queries);
  });
}

squeezekv_status squeezekv_cache_end_update(squeezekv_cache* cache, int32_t layer) {
  return guarded(__func__, [&] {
    require_handle(cache, "cache");
    cache->layer(layer).end_update();
  });
}

int32_t squeezekv_cache_fetch(const squeezekv_cache* cache, int32_t layer, int32_t head, float* keys, float* values,
                              int64_t* positions, int32_t capacity) {
  return guarded_count(__func__, [&] {
    const squeezekv::LayerCache& l = require_handle(cache, "cache").layer(layer);
    squeezekv::capi::check_head(l, head);
    const squeezekv::HeadStore& store = l.head(head);
    return squeezekv::capi::copy_rows(store, store.slots_by_position(), keys, values, positions, capacity);
  });
}

int32_t squeezekv_cache_read_slots(const squeezekv_cache* cache, int32_t layer, int32_t head, float* keys,
                                   float* values, int64_t* positions, int32_t capacity) {
  return guarded_count(__func__, [&] {
    const squeezekv::LayerCache& l = require_handle(cache, "cache").layer(layer);
    squeezekv::capi::check_head(l, head);
    const squeezekv::HeadStore& store = l.head(head);
    std::vector<int> slots(size_t(store.n_slots()));
    for (size_t s = 0; s < slots.size(); ++s) slots[s] = int(s);
    return squeezekv::capi::copy_rows(store, slots, keys, values, positions, capacity);
  });
}

int32_t squeezekv_cache_budgets(const squeezekv_cache* cache, int32_t* budgets, int32_t capacity) {
  return guarded_count(__func__, [&] {
    const squeezekv_cache& c = require_handle(cache, "cache");
    const int32_t n = c.n_layers();
    if (capacity < n) return -n;
    squeezekv::require(budgets != nullptr, "budgets", "NULL", "an output buffer is required");
    for (int32_t l = 0; l < n; ++l) budgets[l] = c.layer(l).layer_budget();
    return n;
  });
}

void squeezekv_cache_begin_prompt(squeezekv_cache* cache) {
  guarded(__func__, [&] {
    if (require_handle(cache, "cache").model) cache->model->begin_prompt();
    else cache->single->begin_prompt();
  });
}

void squeezekv_cache_end_prompt(squeezekv_cache* cache) {
  guarded(__func__, [&] {
    if (require_handle(cache, "cache").model) cache->model->end_prompt();
    else cache->single->end_prompt();
  });
}

void squeezekv_cache_reset(squeezekv_cache* cache) {
  guarded(__func__, [&] {
    if (require_handle(cache, "cache").model) cache->model->reset();
    else cache->single->reset();
    cache->tokens.clear();
  });
}

squeezekv_status squeezekv_cache_layer_stats(const squeezekv_cache* cache, int32_t layer,
                                             squeezekv_layer_stats* stats) {
  return guarded(__func__, [&] {
    const squeezekv::LayerCache& l = require_handle(cache, "cache").layer(layer);
    squeezekv::require(stats != nullptr, "stats", "NULL", "an output struct is required");
    squeezekv_layer_stats& s = *stats;
    s.layer_budget = l.layer_budget();
    s.budget_final = l.budget_final();
    s.concentration = l.concentration();
    s.tokens_seen = l.tokens_seen();
    s.tokens_kept = l.tokens_kept();
    s.kept_bytes = l.kept_bytes();
    s.full_bytes = l.full_bytes();
    s.compression_ratio = l.compression_ratio();
    s.sliding_window = l.sliding() ? l.kind().window : 0;
  });
}

uint64_t squeezekv_cache_kept_bytes(const squeezekv_cache* cache) {
  if (!cache) return 0;
  return cache->model ? cache->model->kept_bytes() : cache->single->kept_bytes();
}

uint64_t squeezekv_cache_sliding_kept_bytes(const squeezekv_cache* cache) {
  if (!cache) return 0;
  if (cache->model) return cache->model->sliding_kept_bytes();
  return cache->single->sliding() ? cache->single->kept_bytes() : 0;
}

uint64_t squeezekv_cache_evicting_kept_bytes(const squeezekv_cache* cache) {
  if (!cache) return 0;
  if (cache->model) return cache->model->evicting_kept_bytes();
  return cache->single->sliding() ? 0 : cache->single->kept_bytes();
}

uint64_t squeezekv_cache_full_bytes(const squeezekv_cache* cache) {
  if (!cache) return 0;
  return cache->model ? cache->model->full_bytes() : cache->single->full_bytes();
}

double squeezekv_cache_compression_ratio(const squeezekv_cache* cache) {
  if (!cache) return 1.0;
  return cache->model ? cache->model->compression_ratio() : cache->single->compression_ratio();
}

}  // extern "C"
