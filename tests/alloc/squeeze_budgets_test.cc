#include "squeezekv/alloc/squeeze_budgets.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "squeezekv/base/errors.h"

namespace squeezekv {
namespace {

long long total(const std::vector<int>& b) { return std::accumulate(b.begin(), b.end(), 0LL); }

TEST(SqueezeBudgets, SeedExample) {
  const std::vector<double> c = {0.1, 0.5, 0.9};
  EXPECT_EQ(squeeze_budgets(c, 100, 4, 1.0), (std::vector<int>{180, 100, 20}));
}

TEST(SqueezeBudgets, ReferenceFloorCaseKeepsTheTotalExactly) {
  // The reference gave [200, 9, 9, 9] (mean 56.75); ours takes the floors' excess back.
  const std::vector<double> c = {0.0, 1.0, 1.0, 1.0};
  EXPECT_EQ(squeeze_budgets(c, 50, 8, 1.0), (std::vector<int>{173, 9, 9, 9}));
}

TEST(SqueezeBudgets, StrengthZeroIsUniformWhateverTheConcentration) {
  const std::vector<double> c = {0.0, 0.3, 0.99, -0.5, 2.0};
  EXPECT_EQ(squeeze_budgets(c, 64, 4, 0.0), std::vector<int>(5, 64));
}

TEST(SqueezeBudgets, TotalConservedAndFloorsHoldOnRandomInputs) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> conc(-0.2, 1.2), str(0.0, 1.0);
  for (int trial = 0; trial < 2000; ++trial) {
    const int layers = 1 + int(rng() % 40);
    const int n_sink = int(rng() % 16);
    const int avg = n_sink + 1 + int(rng() % 600);
    std::vector<double> c(static_cast<size_t>(layers));
    for (double& x : c) x = conc(rng);
    const double s = str(rng);
    const std::vector<int> b = squeeze_budgets(c, avg, n_sink, s);
    ASSERT_EQ(b.size(), size_t(layers));
    EXPECT_EQ(total(b), (long long)layers * avg) << "trial " << trial;
    for (int x : b) EXPECT_GE(x, n_sink + 1);
  }
}

TEST(SqueezeBudgets, MonotoneInConcentrationBroadGetsMore) {
  const std::vector<double> c = {0.05, 0.2, 0.4, 0.6, 0.8};
  const std::vector<int> b = squeeze_budgets(c, 128, 4, 1.0);
  for (size_t i = 1; i < b.size(); ++i) EXPECT_GE(b[i - 1], b[i]);
  EXPECT_GT(b.front(), 128);
  EXPECT_LT(b.back(), 128);
}

TEST(SqueezeBudgets, AllConcentratedFallsBackToUniform) {
  const std::vector<double> c = {1.0, 1.0, 1.5};
  EXPECT_EQ(squeeze_budgets(c, 100, 4, 1.0), std::vector<int>(3, 100));
}

TEST(SqueezeBudgets, NegativeConcentrationClampsToZero) {
  const std::vector<double> a = {-0.7, 0.5}, b = {0.0, 0.5};
  EXPECT_EQ(squeeze_budgets(a, 100, 4, 1.0), squeeze_budgets(b, 100, 4, 1.0));
}

TEST(SqueezeBudgets, StrengthInterpolatesBetweenUniformAndFull) {
  const std::vector<double> c = {0.1, 0.5, 0.9};
  EXPECT_EQ(squeeze_budgets(c, 100, 4, 0.5), (std::vector<int>{140, 100, 60}));
}

TEST(SqueezeBudgets, SingleLayerAndEmpty) {
  EXPECT_EQ(squeeze_budgets(std::vector<double>{0.3}, 77, 4, 1.0), std::vector<int>{77});
  EXPECT_TRUE(squeeze_budgets(std::vector<double>{}, 77, 4, 1.0).empty());
}

TEST(SqueezeBudgets, RejectsBadParametersByName) {
  const std::vector<double> c = {0.1, 0.5};
  EXPECT_THROW(squeeze_budgets(c, 100, 4, 1.5), InvalidArgument);
  EXPECT_THROW(squeeze_budgets(c, 100, 4, -0.1), InvalidArgument);
  EXPECT_THROW(squeeze_budgets(c, 4, 4, 1.0), InvalidArgument);
  const std::vector<double> nan = {0.1, std::nan("")};
  EXPECT_THROW(squeeze_budgets(nan, 100, 4, 1.0), InvalidArgument);
  try {
    squeeze_budgets(c, 100, 4, 1.5);
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("strength = 1.5"), std::string::npos) << e.what();
  }
}

// Issue 64: an average of 2^31 - 1 (or 1.2e9) gave negative budgets to the C API and Python; the
// library refuses what the command line refuses, for every caller.
TEST(SqueezeBudgets, RefusesAveragesBeyondTheCommandLinesLimit) {
  const std::vector<double> c = {0.1, 0.5, 0.9};
  for (int avg : {2147483647, 1200000000, kMaxAvgBudget + 1}) {
    try {
      squeeze_budgets(c, avg, 4, 1.0);
      ADD_FAILURE() << avg << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("avg_budget = " + std::to_string(avg) + ": must be at most 1073741823"),
                std::string::npos)
          << e.what();
    }
  }
  // At the limit every budget is positive and the total is conserved; spread over many layers a
  // budget would pass an int: refused, never wrapped.
  const std::vector<int> b = squeeze_budgets(std::vector<double>{0.5, 0.5}, kMaxAvgBudget, 4, 1.0);
  EXPECT_EQ(b, (std::vector<int>{kMaxAvgBudget, kMaxAvgBudget}));
  EXPECT_THROW(squeeze_budgets(std::vector<double>{0.0, 1.0, 1.0, 1.0}, kMaxAvgBudget, 4, 1.0), InvalidArgument);
}

TEST(FloorAndRound, LargestRemainderTiesToLowerIndex) {
  EXPECT_EQ(floor_and_round({1.5, 1.5, 1.0}, 0.0), (std::vector<int>{2, 1, 1}));
}

}  // namespace
}  // namespace squeezekv
