// The allocators and the concentration proxy as C functions.
#include <algorithm>
#include <vector>

#include "capi/capi_status.h"
#include "squeezekv/alloc/concentration.h"
#include "squeezekv/alloc/pyramid_budgets.h"
#include "squeezekv/alloc/squeeze_budgets.h"

using squeezekv::capi::guarded;

extern "C" {

squeezekv_status squeezekv_squeeze_budgets(const double* concentrations, int32_t n_layers, int32_t avg_budget,
                                           int32_t n_sink, double strength, int32_t* budgets) {
  return guarded(__func__, [&] {
    squeezekv::require(n_layers >= 0, "n_layers", n_layers, "must be >= 0");
    squeezekv::require(n_layers == 0 || concentrations != nullptr, "concentrations", "NULL",
                       "an array of n_layers concentrations is required");
    squeezekv::require(n_layers == 0 || budgets != nullptr, "budgets", "NULL",
                       "an output array of n_layers is required");
    const std::vector<int> out = squeezekv::squeeze_budgets(std::span<const double>(concentrations, size_t(n_layers)),
                                                            avg_budget, n_sink, strength);
    std::copy(out.begin(), out.end(), budgets);
  });
}

squeezekv_status squeezekv_pyramid_budgets(int32_t n_layers, int32_t avg_budget, int32_t n_sink, double beta,
                                           int32_t* budgets) {
  return guarded(__func__, [&] {
    squeezekv::require(budgets != nullptr, "budgets", "NULL", "an output array is required");
    const std::vector<int> out = squeezekv::pyramid_budgets(n_layers, avg_budget, n_sink, beta);
    std::copy(out.begin(), out.end(), budgets);
  });
}

squeezekv_status squeezekv_concentration_score(const float* keys, int32_t n_rows, int32_t head_dim, double* score) {
  return guarded(__func__, [&] {
    squeezekv::require(n_rows >= 0, "n_rows", n_rows, "must be >= 0");
    squeezekv::require(head_dim >= 1, "head_dim", head_dim, "must be >= 1");
    squeezekv::require(keys != nullptr || n_rows == 0, "keys", "NULL",
                       "an array of n_rows x head_dim keys is required");
    squeezekv::require(score != nullptr, "score", "NULL", "an output is required");
    *score = squeezekv::concentration_score(keys, n_rows, head_dim);
  });
}

}  // extern "C"
