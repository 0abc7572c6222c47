// Conserving schedules (issue 38): whatever the allocator and the policy, once the model has seen
// enough tokens the scheduled layers hold exactly the rows they were promised (layers x budget),
// a layer scheduled more than it can hold handing the rest to the others; while the layers have
// seen fewer, each holds everything it has seen. Random layer counts, sliding layers, budgets,
// chunk sizes and position rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/mock_model.h"
#include "squeezekv/alloc/conserve_budgets.h"
#include "squeezekv/cache/model_cache.h"
#include "test_util.h"

namespace squeezekv {
namespace {

constexpr int kHeads = 2, kDim = 8, kSinks = 2;

int64_t sum(const std::vector<int>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

// Rows held by each scheduled layer (every head of a layer holds its budget alike) and the budgets
// it was scheduled, in layer order.
void scheduled_rows(const ModelCache& cache, std::vector<int>& held, std::vector<int>& scheduled) {
  held.clear();
  scheduled.clear();
  for (int l = 0; l < cache.n_layers(); ++l) {
    if (cache.layer(l).sliding()) continue;
    for (int h = 1; h < cache.layer(l).n_heads(); ++h) {
      ASSERT_EQ(cache.layer(l).tokens_kept(h), cache.layer(l).tokens_kept(0)) << "layer " << l;
    }
    held.push_back(cache.layer(l).tokens_kept());
    scheduled.push_back(cache.scheduled_budgets()[size_t(l)]);
  }
}

TEST(Conservation, EveryAllocatorHoldsItsPromiseOnRandomInputs) {
  std::mt19937_64 rng(38);
  const std::vector<std::string> allocators = {"uniform", "pyramid", "squeeze"};
  const std::vector<std::string> policies = {"cumulative", "tova", "knorm", "streaming", "window"};
  for (int trial = 0; trial < 90; ++trial) {
    KVCacheConfig c;
    c.method = "h2o";
    c.policy = policies[size_t(trial) % policies.size()];
    c.allocator = allocators[size_t(trial / 5) % allocators.size()];
    c.n_sink = kSinks;
    c.head_dim = kDim;
    c.budget = int(std::uniform_int_distribution<int>(8, 60)(rng));
    if (c.allocator == "pyramid") c.set("beta", 1.0 + double(rng() % 200) / 50.0);
    if (c.allocator == "squeeze") c.set("strength", 1.0);
    const bool ages = rng() % 3 == 0;  // rows past max_distance go (span rule)
    if (ages) c.max_distance = std::uniform_int_distribution<int>(c.budget / 2 + 4, 3 * c.budget)(rng);
    const int n_layers = std::uniform_int_distribution<int>(2, 7)(rng);
    std::vector<LayerKind> kinds;
    for (int l = 0; l < n_layers; ++l) {
      kinds.push_back(l > 0 && rng() % 3 == 0 ? LayerKind::sliding(int(8 + rng() % 24)) : LayerKind::global());
    }
    ModelCache cache(c, n_layers, kHeads, 1, kinds);
    const std::string where = "trial " + std::to_string(trial) + " " + c.policy + " x " + c.allocator + " budget " +
                              std::to_string(c.budget) +
                              (ages ? " max_distance " + std::to_string(c.max_distance) : "");
    int64_t seen = 0;
    std::vector<int> held, scheduled;
    for (int step = 0; step < 14; ++step) {
      const int n = step < 4 ? int(1 + rng() % 40) : 1 + int(rng() % 3);  // chunks, then decode-like steps
      for (int l = 0; l < n_layers; ++l) {
        const std::vector<float> k = test::mock_layer_keys(l, n_layers, kHeads, n, kDim, rng());
        const std::vector<float> v = test::normal(k.size(), rng());
        cache.layer(l).update(k.data(), v.data(), n);
      }
      seen += n;
      scheduled_rows(cache, held, scheduled);
      const int64_t cap = ages ? std::min<int64_t>(seen, c.max_distance + kSinks) : seen;
      const auto n_scheduled = int64_t(held.size());
      // The promise: the schedule's total, or all that the layers can hold when that is less.
      ASSERT_EQ(sum(held), std::min(sum(scheduled), n_scheduled * cap)) << where << " after " << seen;
      ASSERT_EQ(sum(scheduled), n_scheduled * c.budget) << where;
      for (int h : held) ASSERT_LE(h, cap) << where;
      ASSERT_EQ(held, conserve_budgets(scheduled, cap)) << where << " after " << seen;
    }
  }
}

// A layer given its budget by hand (set_budget) keeps it as given: conservation is the schedule's.
TEST(Conservation, ABudgetSetByHandIsKeptAsGiven) {
  KVCacheConfig c;
  c.method = "pyramidkv";
  c.n_sink = kSinks;
  c.head_dim = kDim;
  c.budget = 40;
  ModelCache cache(c, 3, kHeads);
  ASSERT_GT(cache.scheduled_budgets()[0], 60);
  cache.layer(2).set_budget(5);
  for (int l = 0; l < 3; ++l) {
    const std::vector<float> k = test::normal(size_t(kHeads) * 50 * kDim, uint64_t(l));
    cache.layer(l).update(k.data(), k.data(), 50);
  }
  EXPECT_EQ(cache.layer(2).tokens_kept(), 5);
  EXPECT_EQ(cache.layer(2).layer_budget(), 5);
  // The other two share their own schedule's conservation: the first can hold only 50.
  EXPECT_EQ(cache.layer(0).tokens_kept(), 50);
}

}  // namespace
}  // namespace squeezekv
