#include "squeezekv/alloc/pyramid_budgets.h"
#include "squeezekv/alloc/squeeze_budgets.h"

#include <gtest/gtest.h>

#include <numeric>

#include "squeezekv/base/errors.h"

namespace squeezekv {
namespace {

TEST(PyramidBudgets, ReferenceSchedule) {
  EXPECT_EQ(pyramid_budgets(12, 512, 4, 2.0),
            (std::vector<int>{1019, 927, 835, 742, 650, 558, 466, 374, 282, 189, 97, 5}));
}

TEST(PyramidBudgets, RefusesAveragesBeyondTheCommandLinesLimit) {
  for (int avg : {2147483647, 1200000000}) {
    try {
      pyramid_budgets(4, avg, 4, 2.0);
      ADD_FAILURE() << avg << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("avg_budget = " + std::to_string(avg)), std::string::npos) << e.what();
    }
  }
  for (int b : pyramid_budgets(2, kMaxAvgBudget, 4, 1.5)) EXPECT_GT(b, 0);
  EXPECT_THROW(pyramid_budgets(3, kMaxAvgBudget, 4, 1e6), InvalidArgument);  // a layer beyond an int
}

TEST(PyramidBudgets, BetaOneIsUniform) { EXPECT_EQ(pyramid_budgets(7, 64, 4, 1.0), std::vector<int>(7, 64)); }

TEST(PyramidBudgets, MeanExactWhenFloorsBindAndNonIncreasing) {
  for (double beta : {2.0, 3.0, 5.0, 20.0}) {
    for (int layers : {2, 3, 5, 12, 32}) {
      const std::vector<int> b = pyramid_budgets(layers, 64, 4, beta);
      EXPECT_EQ(std::accumulate(b.begin(), b.end(), 0), layers * 64) << beta << " " << layers;
      for (size_t i = 1; i < b.size(); ++i) EXPECT_GE(b[i - 1], b[i]);
      for (int x : b) EXPECT_GE(x, 5);
    }
  }
}

TEST(PyramidBudgets, SingleLayerAndErrors) {
  EXPECT_EQ(pyramid_budgets(1, 50, 4, 2.0), std::vector<int>{50});
  EXPECT_THROW(pyramid_budgets(4, 50, 4, 0.5), InvalidArgument);
  EXPECT_THROW(pyramid_budgets(4, 4, 4, 2.0), InvalidArgument);
}

}  // namespace
}  // namespace squeezekv
