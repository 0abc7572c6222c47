// RAII for the C API's handles, for C++ programs that use the C interface (as llama-cpp.h does
// for llama.h): std::unique_ptr with the matching *_free as deleter.
#pragma once

#include <memory>

#include "squeezekv/c/squeezekv.h"

namespace squeezekv::c {

struct ParamsDeleter {
  void operator()(squeezekv_cache_params* params) const { squeezekv_cache_params_free(params); }
};
struct CacheDeleter {
  void operator()(squeezekv_cache* cache) const { squeezekv_cache_free(cache); }
};
struct ModelDeleter {
  void operator()(squeezekv_model* model) const { squeezekv_model_free(model); }
};

using ParamsPtr = std::unique_ptr<squeezekv_cache_params, ParamsDeleter>;
using CachePtr = std::unique_ptr<squeezekv_cache, CacheDeleter>;
using ModelPtr = std::unique_ptr<squeezekv_model, ModelDeleter>;

}  // namespace squeezekv::c
