#include "squeezekv/alloc/concentration.h"

#include <gtest/gtest.h>

#include <cmath>

#include "squeezekv/base/errors.h"

#include "test_util.h"

namespace squeezekv {
namespace {

TEST(Concentration, IdenticalKeysScoreOne) {
  std::vector<float> keys;
  for (int j = 0; j < 10; ++j) keys.insert(keys.end(), {1.0f, 2.0f, -3.0f, 0.5f});
  EXPECT_NEAR(concentration_score(keys.data(), 10, 4), 1.0, 1e-6);
}

TEST(Concentration, OrthogonalKeysScoreZero) {
  std::vector<float> keys(16, 0.0f);
  for (int j = 0; j < 4; ++j) keys[size_t(j * 4 + j)] = float(j + 1);
  EXPECT_NEAR(concentration_score(keys.data(), 4, 4), 0.0, 1e-9);
}

TEST(Concentration, ScaleInvariantAndNeutralBelowTwoRows) {
  std::vector<float> keys = test::normal(64 * 16, 3);
  std::vector<float> scaled = keys;
  for (size_t i = 0; i < scaled.size(); ++i) scaled[i] *= float(1 + i / 16);  // per-row scale
  EXPECT_NEAR(concentration_score(keys.data(), 64, 16), concentration_score(scaled.data(), 64, 16), 1e-6);
  EXPECT_EQ(concentration_score(keys.data(), 1, 16), 0.0);
  EXPECT_EQ(concentration_score(keys.data(), 0, 16), 0.0);
}

TEST(Concentration, LinearFormEqualsPairwiseOracle) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const int n = 2 + int(seed * 37 % 300), dim = 1 + int(seed * 13 % 130);
    std::vector<float> keys = test::normal(size_t(n * dim), seed);
    // Mix in a shared direction so the values span the range.
    for (int j = 0; j < n; ++j) {
      for (int d = 0; d < dim; ++d) keys[size_t(j * dim + d)] += float(seed % 5) * 0.7f;
    }
    const double fast = concentration_score(keys.data(), n, dim);
    EXPECT_NEAR(fast, concentration_score_pairwise(keys.data(), n, dim), 1e-5) << seed;
    EXPECT_GE(fast, -1.0);
    EXPECT_LE(fast, 1.0 + 1e-9);
  }
}

TEST(Concentration, MeanOverHeads) {
  std::vector<float> keys = test::normal(3 * 20 * 8, 9);
  double expected = 0;
  for (int h = 0; h < 3; ++h) expected += concentration_score(keys.data() + h * 160, 20, 8) / 3;
  EXPECT_DOUBLE_EQ(concentration_score(keys.data(), 3, 20, 8), expected);
}

TEST(Concentration, NonFiniteKeysAreRejected) {
  std::vector<float> keys = test::normal(3 * 4, 1);
  keys[5] = std::nanf("");
  EXPECT_THROW(concentration_score(keys.data(), 3, 4), InvalidArgument);
  keys[5] = INFINITY;
  EXPECT_THROW(concentration_score(keys.data(), 1, 3, 4), InvalidArgument);
}

}  // namespace
}  // namespace squeezekv
