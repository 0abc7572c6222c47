// The C API's cache handles (capi_cache.cc): a model's caches or one lone layer, and the
// parameters they are built from.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "squeezekv/c/squeezekv.h"
#include "squeezekv/cache/model_cache.h"

struct squeezekv_cache {
  // Exactly one is set: a whole model's caches, or one lone layer (KVCacheFactory::create).
  std::unique_ptr<squeezekv::ModelCache> model;
  std::unique_ptr<squeezekv::LayerCache> single;
  std::vector<int32_t> tokens;  // what a model cache has seen through squeezekv_generate (or its file)

  int32_t n_layers() const { return model ? model->n_layers() : 1; }
  squeezekv::LayerCache& layer(int32_t l);
  const squeezekv::LayerCache& layer(int32_t l) const;
};

struct squeezekv_cache_params {
  squeezekv::KVCacheConfig config;  // every default until set by name
};

namespace squeezekv::capi {

// keys and values of an update, each named when NULL.
void require_rows(const float* keys, const float* values);

// The configuration behind a handle, validated (InvalidArgument naming the first bad parameter).
const KVCacheConfig& to_config(const squeezekv_cache_params* params);

}  // namespace squeezekv::capi
