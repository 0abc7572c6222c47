// The C API's model handle (squeezekv_model_load in capi_engine.cc), which generation, perplexity
// and saved caches read.
#pragma once

#include "squeezekv/engine/model.h"

struct squeezekv_model {
  squeezekv::Model model;
};
