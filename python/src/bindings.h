// The pieces of the squeezekv._native extension, one file each.
#pragma once

#include <pybind11/pybind11.h>

namespace squeezekv::python {

void bind_errors(pybind11::module_& m);  // InvalidArgument -> ValueError, FormatError -> FormatError
void bind_config(pybind11::module_& m);  // NativeConfig (the C++ KVCacheConfig), methods()
void bind_cache(pybind11::module_& m);   // LayerCache, ModelCache, create_layer
void bind_alloc(pybind11::module_& m);   // squeeze_budgets, pyramid_budgets, concentration_score
void bind_engine(pybind11::module_& m);  // Model, generate, perplexity

// A Python-side size as int, ValueError naming `name` when it does not fit.
int checked_int(long long value, const char* name);

}  // namespace squeezekv::python
