// The C API's RAII header from C++: handles freed by unique_ptr, budgets read through the C calls.
#include "squeezekv/c/squeezekv.hpp"
#include "test_util.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

TEST(CapiRaii, CacheAndModelHandlesOwnThemselves) {
  squeezekv::c::ParamsPtr p(squeezekv_cache_params_new());
  ASSERT_EQ(squeezekv_cache_params_set(p.get(), "method", "pyramidkv"), SQUEEZEKV_STATUS_OK);
  ASSERT_EQ(squeezekv_cache_params_set_int(p.get(), "head_dim", 16), SQUEEZEKV_STATUS_OK);
  ASSERT_EQ(squeezekv_cache_params_set_int(p.get(), "budget", 512), SQUEEZEKV_STATUS_OK);
  squeezekv::c::CachePtr cache(squeezekv_cache_init(p.get(), 12, 2, 1));
  ASSERT_NE(cache, nullptr) << squeezekv_last_error();
  EXPECT_EQ(squeezekv_cache_n_layers(cache.get()), 12);
  std::vector<int32_t> budgets(12);
  ASSERT_EQ(squeezekv_cache_budgets(cache.get(), budgets.data(), 12), 12);
  EXPECT_EQ(budgets, (std::vector<int32_t>{1019, 927, 835, 742, 650, 558, 466, 374, 282, 189, 97, 5}));
  EXPECT_EQ(squeezekv_cache_budgets(cache.get(), budgets.data(), 3), -12);  // too small: -needed

  squeezekv::c::ModelPtr model(squeezekv_model_load(squeezekv::test::kStoriesModel));
  ASSERT_NE(model, nullptr) << squeezekv_last_error();
  squeezekv::c::ModelPtr missing(squeezekv_model_load("no/such/model.gguf"));
  EXPECT_EQ(missing, nullptr);
  EXPECT_NE(std::string(squeezekv_last_error()).find("no/such/model.gguf"), std::string::npos);
}

}  // namespace
