#include "squeezekv/cache/model_cache.h"

#include <gtest/gtest.h>

#include <numeric>

#include "core/mock_model.h"
#include "squeezekv/alloc/squeeze_budgets.h"
#include "squeezekv/base/errors.h"

namespace squeezekv {
namespace {

KVCacheConfig squeeze(int budget, double strength, int dim = 16) {
  KVCacheConfig c;
  c.method = "squeeze";
  c.budget = budget;
  c.n_sink = 4;
  c.set("strength", strength);
  c.head_dim = dim;
  return c;
}

// Prefills every layer with the mock model's keys, then decodes `decode` tokens per layer.
void run_mock(ModelCache& cache, int heads, int seq, int dim, int decode, uint64_t seed) {
  const int L = cache.n_layers();
  for (int l = 0; l < L; ++l) {
    const auto k = test::mock_layer_keys(l, L, heads, seq, dim, seed + uint64_t(l));
    const auto v = test::normal(k.size(), seed + 1000 + uint64_t(l));
    cache.layer(l).update(k.data(), v.data(), seq);
  }
  for (int t = 0; t < decode; ++t) {
    for (int l = 0; l < L; ++l) {
      const auto k = test::mock_layer_keys(l, L, heads, 1, dim, seed + 5000 + uint64_t(t * L + l));
      const auto v = test::normal(k.size(), seed + 9000 + uint64_t(t * L + l));
      cache.layer(l).update(k.data(), v.data(), 1);
    }
  }
}

TEST(Coordinator, NotFinalUntilEveryLayerReportsThenPublishes) {
  auto model = KVCacheBuilder::for_model(3, squeeze(100, 1.0), 2);
  BudgetCoordinator* coord = model->coordinator();
  ASSERT_NE(coord, nullptr);
  coord->report(0, 0.1);
  coord->report(0, 0.9);  // ignored: the first report wins
  coord->report(1, 0.5);
  EXPECT_FALSE(coord->is_final());
  EXPECT_EQ(model->budgets(), (std::vector<int>{100, 100, 100}));
  coord->report(2, 0.9);
  ASSERT_TRUE(coord->is_final());
  EXPECT_EQ(coord->budgets(), (std::vector<int>{180, 100, 20}));
  EXPECT_EQ(model->budgets(), (std::vector<int>{180, 100, 20}));
  model->reset();
  EXPECT_FALSE(coord->is_final());
  EXPECT_EQ(model->budgets(), (std::vector<int>{100, 100, 100}));
}

TEST(ForModel, OneSharedCoordinatorAndDataDrivenBudgets) {
  auto model = KVCacheBuilder::for_model(6, squeeze(64, 1.0, 32), 4);
  run_mock(*model, 4, 256, 32, 3, 1);
  ASSERT_TRUE(model->coordinator()->is_final());
  const std::vector<int> b = model->budgets();
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), 0), 6 * 64);
  EXPECT_GT(b.front(), b.back());
  for (size_t i = 1; i < b.size(); ++i) EXPECT_GE(b[i - 1], b[i]);
  // The broad first layer keeps more rows than the concentrated last one, and no layer exceeds
  // its own budget after the re-budget.
  EXPECT_GT(model->layer(0).tokens_kept(), model->layer(5).tokens_kept());
  for (int l = 0; l < 6; ++l) {
    EXPECT_LE(model->layer(l).tokens_kept(), b[size_t(l)]);
    EXPECT_GT(model->layer(l).concentration(), l == 0 ? -0.1 : model->layer(l - 1).concentration());
  }
}

TEST(ForModel, RaisedBudgetAfterPrefillReallyHoldsThatManyRows) {
  // The reference threw its prefill away before the schedule was known (215 budgeted, 65 held).
  auto model = KVCacheBuilder::for_model(4, squeeze(64, 1.0, 32), 2);
  run_mock(*model, 2, 256, 32, 1, 3);
  const int b0 = model->layer(0).layer_budget();
  ASSERT_GT(b0, 64);
  EXPECT_EQ(model->layer(0).tokens_kept(), b0);
}

TEST(ForModel, MemoryFollowsEachLayersBudget) {
  auto model = KVCacheBuilder::for_model(4, squeeze(64, 1.0, 32), 2);
  run_mock(*model, 2, 256, 32, 2, 3);
  for (int l = 0; l < 4; ++l) {
    const size_t expected = 2 /*heads*/ * 2 /*K,V*/ * size_t(model->layer(l).layer_budget() + 1) * 32 * 2;
    EXPECT_EQ(model->layer(l).kept_bytes(), expected) << "layer " << l;
  }
  EXPECT_NE(model->layer(0).kept_bytes(), model->layer(3).kept_bytes());
}

TEST(ForModel, StrengthZeroIsBitIdenticalToH2O) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    KVCacheConfig sq = squeeze(40, 0.0, 16);
    KVCacheConfig h = sq;
    h.method = "h2o";
    auto a = KVCacheBuilder::for_model(3, sq, 2);
    auto b = KVCacheBuilder::for_model(3, h, 2);
    run_mock(*a, 2, 100, 16, 12, seed);
    run_mock(*b, 2, 100, 16, 12, seed);
    for (int l = 0; l < 3; ++l) {
      for (int hd = 0; hd < 2; ++hd) {
        const HeadStore& x = a->layer(l).head(hd);
        const HeadStore& y = b->layer(l).head(hd);
        ASSERT_EQ(x.n_slots(), y.n_slots());
        for (int s = 0; s < x.n_slots(); ++s) {
          ASSERT_EQ(x.positions()[s], y.positions()[s]);
          ASSERT_EQ(x.scores()[s], y.scores()[s]);  // bit-identical
        }
      }
    }
  }
}

TEST(ForModel, DeterministicForIdenticalInput) {
  auto a = KVCacheBuilder::for_model(4, squeeze(32, 1.0, 16), 2);
  auto b = KVCacheBuilder::for_model(4, squeeze(32, 1.0, 16), 2);
  run_mock(*a, 2, 80, 16, 10, 11);
  run_mock(*b, 2, 80, 16, 10, 11);
  EXPECT_EQ(a->budgets(), b->budgets());
  for (int l = 0; l < 4; ++l) {
    const FetchedRows x = a->layer(l).fetch(1), y = b->layer(l).fetch(1);
    EXPECT_EQ(x.positions, y.positions);
    EXPECT_EQ(x.keys, y.keys);
    EXPECT_EQ(x.values, y.values);
  }
}

TEST(ForModel, ChunkedPrefillKeepsTheFirstChunkUntilTheScheduleIsFinal) {
  auto model = KVCacheBuilder::for_model(2, squeeze(16, 1.0, 8), 1);
  const auto k = test::normal(40 * 8, 1), v = test::normal(40 * 8, 2);
  model->layer(0).update(k.data(), v.data(), 40);
  EXPECT_EQ(model->layer(0).tokens_kept(), 40);  // not final yet: nothing evicted
  model->layer(1).update(k.data(), v.data(), 40);
  EXPECT_TRUE(model->coordinator()->is_final());
  EXPECT_LE(model->layer(0).tokens_kept(), model->layer(0).layer_budget());
  EXPECT_LE(model->layer(1).tokens_kept(), model->layer(1).layer_budget());
}

TEST(ForModel, FixedSchedulesNeedNoCoordinator) {
  KVCacheConfig c = squeeze(512, 1.0);
  c.method = "pyramidkv";
  auto model = KVCacheBuilder::for_model(12, c, 1);
  EXPECT_EQ(model->coordinator(), nullptr);
  EXPECT_EQ(model->budgets(), (std::vector<int>{1019, 927, 835, 742, 650, 558, 466, 374, 282, 189, 97, 5}));
  c.method = "h2o";
  EXPECT_EQ(KVCacheBuilder::for_model(3, c)->budgets(), std::vector<int>(3, 512));
}

TEST(ForModel, RejectsBadConfigurationAtBuildTime) {
  KVCacheConfig c = squeeze(4, 1.0);
  EXPECT_THROW(KVCacheBuilder::for_model(3, c), InvalidArgument);
  c = squeeze(64, 1.0);
  EXPECT_THROW(KVCacheBuilder::for_model(0, c), InvalidArgument);
  EXPECT_THROW(ModelCache(c, 2, 0), InvalidArgument);
}

// Reset under a coordinator (docs/semantics.md, "The coordinator"): one layer's reset keeps the
// published budget, so that layer evicts again on its next prompt; the whole cache's reset clears
// the schedule and every layer measures again.
TEST(Reset, OneLayerOfAFinalScheduleKeepsItsBudgetAndEvictsAgain) {
  for (const char* method : {"squeeze", "h2o", "pyramidkv", "streaming"}) {
    KVCacheConfig c = squeeze(16, 1.0, 16);
    c.method = method;
    auto model = KVCacheBuilder::for_model(3, c, 2);
    run_mock(*model, 2, 200, 16, 0, 11);
    const std::vector<int> budgets = model->budgets();
    model->layer(1).reset();
    EXPECT_EQ(model->layer(1).tokens_seen(), 0) << method;
    EXPECT_EQ(model->budgets(), budgets) << method;
    EXPECT_TRUE(model->layer(1).budget_final()) << method;
    // 2000 new tokens into the reset layer: it stays within its budget.
    for (int chunk = 0; chunk < 10; ++chunk) {
      const auto k = test::mock_layer_keys(1, 3, 2, 200, 16, 77 + uint64_t(chunk));
      const auto v = test::normal(k.size(), 99 + uint64_t(chunk));
      model->layer(1).update(k.data(), v.data(), 200);
    }
    EXPECT_EQ(model->layer(1).tokens_seen(), 2000) << method;
    EXPECT_LE(model->layer(1).tokens_kept(), budgets[1]) << method;
  }
}

TEST(Reset, WholeModelCacheMeasuresAgain) {
  auto model = KVCacheBuilder::for_model(3, squeeze(16, 1.0, 16), 2);
  run_mock(*model, 2, 200, 16, 0, 11);
  ASSERT_TRUE(model->coordinator()->is_final());
  model->reset();
  EXPECT_FALSE(model->coordinator()->is_final());
  for (int l = 0; l < 3; ++l) {
    EXPECT_FALSE(model->layer(l).budget_final());
    EXPECT_EQ(model->layer(l).layer_budget(), 16);
  }
  run_mock(*model, 2, 200, 16, 2, 12);
  ASSERT_TRUE(model->coordinator()->is_final());
  const std::vector<int> b = model->budgets();
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), 0), 3 * 16);
  for (int l = 0; l < 3; ++l) EXPECT_LE(model->layer(l).tokens_kept(), b[size_t(l)]);
}

TEST(Reset, OneLayerBeforeTheScheduleIsFinalWaitsForTheOthers) {
  auto model = KVCacheBuilder::for_model(2, squeeze(16, 1.0, 16), 1);
  const auto k0 = test::mock_layer_keys(0, 2, 1, 100, 16, 1);
  model->layer(0).update(k0.data(), k0.data(), 100);
  model->layer(0).reset();
  EXPECT_FALSE(model->layer(0).budget_final());
  model->layer(0).update(k0.data(), k0.data(), 100);
  const auto k1 = test::mock_layer_keys(1, 2, 1, 100, 16, 2);
  model->layer(1).update(k1.data(), k1.data(), 100);
  ASSERT_TRUE(model->coordinator()->is_final());
  for (int l = 0; l < 2; ++l) EXPECT_LE(model->layer(l).tokens_kept(), model->budgets()[size_t(l)]);
}

}  // namespace
}  // namespace squeezekv
