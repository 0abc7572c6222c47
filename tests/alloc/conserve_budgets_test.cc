// conserve_budgets: a schedule capped at what each layer can hold, the excess handed to the layers
// below the cap in proportion to their budgets (alloc/conserve_budgets.h).
#include "squeezekv/alloc/conserve_budgets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "squeezekv/base/errors.h"

namespace squeezekv {
namespace {

int64_t sum(const std::vector<int>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

TEST(ConserveBudgets, HandsTheExcessToTheLayersThatCanHoldIt) {
  // synth's case: a layer scheduled 444 rows with 300 tokens to hold gives its 144 to the other.
  EXPECT_EQ(conserve_budgets(std::vector<int>{444, 100}, 300), (std::vector<int>{300, 244}));
  // Proportional to the schedule: 5 rows for two layers of 2 each, the half row to the first.
  EXPECT_EQ(conserve_budgets(std::vector<int>{6, 2, 2}, 5), (std::vector<int>{5, 3, 2}));
  // A second pass caps the layers the first pass's share lifted past the cap.
  EXPECT_EQ(conserve_budgets(std::vector<int>{10, 10, 40}, 20), (std::vector<int>{20, 20, 20}));
  EXPECT_EQ(conserve_budgets(std::vector<int>{30, 12, 6}, 20), (std::vector<int>{20, 19, 9}));
  // More promised than the layers can hold together: every layer holds everything.
  EXPECT_EQ(conserve_budgets(std::vector<int>{50, 40, 30}, 25), (std::vector<int>{25, 25, 25}));
}

TEST(ConserveBudgets, LeavesAScheduleWithinTheCapAlone) {
  const std::vector<int> schedule = {7, 3, 12, 1};
  EXPECT_EQ(conserve_budgets(schedule, 12), schedule);
  EXPECT_EQ(conserve_budgets(schedule, 1000), schedule);
  EXPECT_TRUE(conserve_budgets(std::vector<int>{}, 5).empty());
}

TEST(ConserveBudgets, RefusesBadInput) {
  EXPECT_THROW(conserve_budgets(std::vector<int>{4, 4}, 0), InvalidArgument);
  EXPECT_THROW(conserve_budgets(std::vector<int>{4, -1}, 3), InvalidArgument);
}

// On random schedules and caps: the total is conserved up to what the layers can hold, no layer
// passes the cap or drops below its own capped budget, the layers below the cap share the excess in
// proportion (within one row of rounding), and the result is the same on every call.
TEST(ConserveBudgets, ConservesOnRandomSchedules) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 40)(rng);
    std::vector<int> schedule(static_cast<size_t>(n));
    for (int& b : schedule) b = std::uniform_int_distribution<int>(1, 600)(rng);
    const int64_t cap = std::uniform_int_distribution<int64_t>(1, 700)(rng);
    const std::vector<int> out = conserve_budgets(schedule, cap);
    ASSERT_EQ(out, conserve_budgets(schedule, cap));
    ASSERT_EQ(out.size(), schedule.size());
    ASSERT_EQ(sum(out), std::min(sum(schedule), int64_t(n) * cap)) << "trial " << trial;
    // One scale for every layer: |out[i] - scale * schedule[i]| < 1 below the cap, and
    // scale * schedule[i] > cap - 1 at it; some scale must satisfy every layer's interval.
    double lo = 0.0, hi = 1e300;
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_LE(out[i], cap);
      ASSERT_GE(out[i], std::min<int64_t>(schedule[i], cap));
      lo = std::max(lo, (out[i] - 1.0) / schedule[i]);
      if (out[i] < cap) hi = std::min(hi, (out[i] + 1.0) / schedule[i]);
    }
    ASSERT_LT(lo, hi + 1e-12) << "no common scale, trial " << trial;
  }
}

// The caller-kept buffers: the same result as conserve_budgets on every call, whatever the last
// call left in them, and once grown to the largest schedule they are reused, not reallocated.
TEST(ConserveBudgets, IntoReusesTheCallersBuffers) {
  std::mt19937 rng(11);
  std::vector<int> out;
  ConserveScratch scratch;
  const std::vector<int> widest(40, 600);
  conserve_budgets_into(widest, 1, out, scratch);
  const int* out_data = out.data();
  const double* share_data = scratch.share.data();
  const size_t* order_data = scratch.order.data();
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = std::uniform_int_distribution<int>(0, 40)(rng);
    std::vector<int> schedule(static_cast<size_t>(n));
    for (int& b : schedule) b = std::uniform_int_distribution<int>(0, 600)(rng);
    const int64_t cap = std::uniform_int_distribution<int64_t>(1, 700)(rng);
    conserve_budgets_into(schedule, cap, out, scratch);
    ASSERT_EQ(out, conserve_budgets(schedule, cap)) << "trial " << trial;
    ASSERT_EQ(out.data(), out_data);
    ASSERT_EQ(scratch.share.data(), share_data);
    ASSERT_EQ(scratch.order.data(), order_data);
  }
}

}  // namespace
}  // namespace squeezekv
