// Shared by the C API's sources: the handle structs and the guard that turns every C++ exception
// into a status code plus a message, so that none crosses the C boundary.
#pragma once

#include <climits>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "squeezekv/c/squeezekv.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/cache/model_cache.h"
#include "squeezekv/engine/model.h"

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

struct squeezekv_model {
  squeezekv::Model model;
};

namespace squeezekv::capi {

// Records `message` as this thread's last error, logs it and returns `status`.
squeezekv_status fail(squeezekv_status status, const char* where, const std::string& message);

// The status of the exception being handled (call inside a catch block only).
squeezekv_status fail_current(const char* where);

void log_message(squeezekv_log_level level, const std::string& text);

// Runs fn; any exception becomes a status and the thread's last error.
template <typename Fn>
squeezekv_status guarded(const char* where, Fn&& fn) noexcept {
  try {
    fn();
    return SQUEEZEKV_STATUS_OK;
  } catch (...) {
    return fail_current(where);
  }
}

// For the functions that return a count: fn's result, or INT32_MIN on an exception.
template <typename Fn>
int32_t guarded_count(const char* where, Fn&& fn) noexcept {
  try {
    return fn();
  } catch (...) {
    fail_current(where);
    return INT32_MIN;
  }
}

template <typename T>
const T& require_handle(const T* handle, const char* name) {
  require(handle != nullptr, name, "NULL", "a handle is required");
  return *handle;
}

// keys and values of an update, each named when NULL.
void require_rows(const float* keys, const float* values);

// The configuration behind a handle, validated (InvalidArgument naming the first bad parameter).
const KVCacheConfig& to_config(const squeezekv_cache_params* params);

}  // namespace squeezekv::capi
