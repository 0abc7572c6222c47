#include "squeezekv/alloc/hidden_cosine_budgets.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "squeezekv/base/errors.h"

namespace squeezekv {
namespace {

TEST(KMeans1D, ThreeObviousGroups) {
  const std::vector<double> v = {0.10, 0.92, 0.50, 0.12, 0.95, 0.48, 0.11};
  EXPECT_EQ(kmeans_1d(v, 3), (std::vector<int>{0, 2, 1, 0, 2, 1, 0}));
}

TEST(KMeans1D, AnOutlierLayerFormsItsOwnGroup) {
  // Layer 0 changes the residual stream far more than the rest (low cosine).
  const std::vector<double> v = {0.05, 0.80, 0.82, 0.81, 0.95, 0.96};
  const std::vector<int> g = kmeans_1d(v, 3);
  EXPECT_EQ(g[0], 0);
  EXPECT_EQ(std::count(g.begin(), g.end(), 0), 1);
  EXPECT_EQ(g, (std::vector<int>{0, 1, 1, 1, 2, 2}));
}

TEST(KMeans1D, IsOptimalAgainstBruteForce) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 3 + trial % 7;
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = u(rng);
    auto sse = [&](const std::vector<int>& g) {
      double total = 0;
      for (int c = 0; c < 3; ++c) {
        double s = 0, s2 = 0;
        int m = 0;
        for (int i = 0; i < n; ++i) {
          if (g[size_t(i)] == c) s += v[size_t(i)], s2 += v[size_t(i)] * v[size_t(i)], ++m;
        }
        if (m) total += s2 - s * s / m;
      }
      return total;
    };
    double best = 1e300;
    std::vector<int> g(static_cast<size_t>(n), 0);
    // Every assignment of n values to 3 labels.
    int combos = 1;
    for (int i = 0; i < n; ++i) combos *= 3;
    for (int code = 0; code < combos; ++code) {
      int c = code;
      for (int i = 0; i < n; ++i, c /= 3) g[size_t(i)] = c % 3;
      best = std::min(best, sse(g));
    }
    EXPECT_NEAR(sse(kmeans_1d(v, 3)), best, 1e-12) << trial;
  }
}

TEST(KMeans1D, DeterministicAndFewerValuesThanGroups) {
  const std::vector<double> v = {0.3, 0.3, 0.3, 0.7};
  EXPECT_EQ(kmeans_1d(v, 3), kmeans_1d(v, 3));
  EXPECT_EQ(kmeans_1d(std::vector<double>{0.9, 0.1}, 3), (std::vector<int>{1, 0}));
  EXPECT_TRUE(kmeans_1d(std::vector<double>{}, 3).empty());
}

TEST(HiddenCosineBudgets, TopGroupGetsTheFractionAndTheRestShares) {
  // Groups: {0.1, 0.12} low, {0.5} middle, {0.9, 0.92} high -> 2 layers at 0.4 * 100.
  const std::vector<double> cos = {0.1, 0.9, 0.5, 0.92, 0.12};
  const std::vector<int> b = hidden_cosine_budgets(cos, 100, 4, 0.4);
  EXPECT_EQ(b, (std::vector<int>{140, 40, 140, 40, 140}));
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), 0), 500);
}

TEST(HiddenCosineBudgets, ConservedWithFloorsAndStrengthBlends) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 500; ++trial) {
    const int n = 1 + trial % 40;
    std::vector<double> cos(static_cast<size_t>(n));
    for (double& x : cos) x = u(rng);
    const int avg = 5 + trial % 300;
    const std::vector<int> b = hidden_cosine_budgets(cos, avg, 4, 0.05 + u(rng) * 0.95, u(rng));
    EXPECT_EQ(std::accumulate(b.begin(), b.end(), 0), n * avg);
    for (int x : b) EXPECT_GE(x, 5);
  }
  const std::vector<double> cos = {0.1, 0.9, 0.5};
  EXPECT_EQ(hidden_cosine_budgets(cos, 64, 4, 0.3, 0.0), std::vector<int>(3, 64));
}

TEST(HiddenCosineBudgets, ClampedToTheSequenceLength) {
  const std::vector<double> cos = {0.1, 0.2, 0.95, 0.96};
  // Unclamped: 0.25 * 100 for the two high layers, 175 for the others; 150 rows is all there is.
  EXPECT_EQ(hidden_cosine_budgets(cos, 100, 4, 0.25), (std::vector<int>{175, 175, 25, 25}));
  const std::vector<int> b = hidden_cosine_budgets(cos, 100, 4, 0.25, 1.0, 150);
  EXPECT_EQ(b, (std::vector<int>{150, 150, 50, 50}));
}

TEST(HiddenCosineBudgets, RejectsBadParameters) {
  const std::vector<double> cos = {0.1, 0.9};
  EXPECT_THROW(hidden_cosine_budgets(cos, 100, 4, 0.0), InvalidArgument);
  EXPECT_THROW(hidden_cosine_budgets(cos, 100, 4, 1.5), InvalidArgument);
  EXPECT_THROW(hidden_cosine_budgets(cos, 4, 4, 0.5), InvalidArgument);
  const std::vector<double> nan = {0.1, std::nan("")};
  EXPECT_THROW(hidden_cosine_budgets(nan, 100, 4, 0.5), InvalidArgument);
}

}  // namespace
}  // namespace squeezekv
