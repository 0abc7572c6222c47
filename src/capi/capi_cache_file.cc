// Saved caches through the C API (engine/cache_file.h): save, load, the tokens a cache has seen.
#include <algorithm>

#include "capi/capi_cache.h"
#include "capi/capi_engine.h"
#include "capi/capi_status.h"
#include "squeezekv/engine/cache_file.h"

using squeezekv::capi::guarded;
using squeezekv::capi::guarded_count;
using squeezekv::capi::require_handle;

extern "C" {

squeezekv_status squeezekv_cache_save(const squeezekv_model* model, const squeezekv_cache* cache, const char* path) {
  return guarded(__func__, [&] {
    const squeezekv::Model& m = require_handle(model, "model").model;
    squeezekv::require(require_handle(cache, "cache").model != nullptr, "cache", "a lone layer",
                       "only a model cache is saved (squeezekv_cache_init_for_model)");
    squeezekv::require(path != nullptr, "path", "NULL", "a file path is required");
    squeezekv::save_cache_file(path, m, *cache->model, cache->tokens);
  });
}

squeezekv_status squeezekv_cache_load(const squeezekv_model* model, const char* path, squeezekv_cache** out) {
  if (out != nullptr) *out = nullptr;
  return guarded(__func__, [&] {
    const squeezekv::Model& m = require_handle(model, "model").model;
    squeezekv::require(path != nullptr, "path", "NULL", "a file path is required");
    squeezekv::require(out != nullptr, "out", "NULL", "a place for the cache is required");
    squeezekv::LoadedCache loaded = squeezekv::load_cache_file(path, m);
    auto cache = std::make_unique<squeezekv_cache>();
    cache->model = std::move(loaded.cache);
    cache->tokens = std::move(loaded.contents.tokens);
    *out = cache.release();
  });
}

int32_t squeezekv_cache_tokens(const squeezekv_cache* cache, int32_t* tokens, int32_t n_max) {
  return guarded_count(__func__, [&]() -> int32_t {
    const std::vector<int32_t>& seen = require_handle(cache, "cache").tokens;
    const auto n = int32_t(seen.size());
    if (n_max < n) return -n;
    squeezekv::require(tokens != nullptr || n == 0, "tokens", "NULL", "an output array of n_max ids is required");
    std::copy(seen.begin(), seen.end(), tokens);
    return n;
  });
}

}  // extern "C"
