// Sliding-window layers (core/layer_kind.h) in a model cache: each holds exactly its window under
// every method and storage format, the allocators schedule the evicting layers alone, and the
// accounting keeps the two apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/mock_model.h"
#include "squeezekv/alloc/conserve_budgets.h"
#include "squeezekv/alloc/pyramid_budgets.h"
#include "squeezekv/alloc/squeeze_budgets.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/cache/model_cache.h"
#include "squeezekv/methods/registry.h"
#include "squeezekv/ops/kv_rows.h"
#include "test_util.h"

namespace squeezekv {
namespace {

constexpr int kHeads = 2, kDim = 8;

KVCacheConfig config_for(const std::string& method, int budget) {
  KVCacheConfig c;
  c.method = method;
  c.budget = budget;
  c.n_sink = 2;
  c.head_dim = kDim;
  return c;
}

// The message of the InvalidArgument `fn` throws ("" when it throws none).
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

void update(LayerCache& layer, int n, uint64_t seed) {
  const std::vector<float> k = test::normal(size_t(layer.n_heads()) * size_t(n) * kDim, seed);
  const std::vector<float> v = test::normal(k.size(), seed + 1);
  layer.update(k.data(), v.data(), n);
}

// Every head of a sliding layer holds the positions [max(0, seen - window), seen), in order.
void expect_window(const LayerCache& layer, int64_t seen, const std::string& where) {
  const int window = layer.kind().window;
  const int64_t first = std::max<int64_t>(0, seen - window);
  std::vector<int64_t> expected(size_t(seen - first));
  std::iota(expected.begin(), expected.end(), first);
  for (int h = 0; h < layer.n_heads(); ++h) {
    ASSERT_EQ(layer.fetch(h).positions, expected) << where << " head " << h;
    ASSERT_EQ(layer.tokens_kept(h), int(expected.size())) << where;
  }
  ASSERT_EQ(layer.full_bytes(), size_t(layer.n_heads()) * expected.size() * kv_token_bytes(layer.config())) << where;
}

TEST(LayerKinds, BadInputNamesTheField) {
  const KVCacheConfig c = config_for("h2o", 16);
  EXPECT_NE(error_of([&] {
              ModelCache(c, 3, kHeads, 1, {LayerKind::global(), LayerKind::sliding(4)});
            }).find("layer_kinds.size() = 2: must equal n_layers = 3"),
            std::string::npos);
  for (const int bad : {0, -5}) {
    const std::string e = error_of([&] {
      ModelCache(c, 3, kHeads, 1, {LayerKind::global(), LayerKind::global(), LayerKind::sliding(bad)});
    });
    EXPECT_NE(e.find("layer_kinds[2].window = " + std::to_string(bad)), std::string::npos) << e;
  }
  EXPECT_NE(error_of([&] {
              ModelCache(c, 1, kHeads, 1, {LayerKind{AttentionKind::global, 7}});
            }).find("layer_kinds[0].window = 7: a global layer has no window"),
            std::string::npos);
  EXPECT_NE(error_of([&] { KVCacheFactory::create(c, kHeads, 1, LayerKind::sliding(0)); }).find("kind.window = 0"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { LayerCache(c, resolve_cache_parts(c), 0, kHeads, 1, LayerKind::global()); }).find("kind = global"),
      std::string::npos);
  EXPECT_NE(error_of([] { periodic_layer_kinds(6, 0, 3); }).find("window = 0"), std::string::npos);
  EXPECT_NE(error_of([] { periodic_layer_kinds(6, 8, 0); }).find("period = 0"), std::string::npos);
}

TEST(LayerKinds, Gemma3PatternMakesEverySixthLayerGlobal) {
  const std::vector<LayerKind> kinds = periodic_layer_kinds(18, 512, 6);
  ASSERT_EQ(kinds.size(), 18u);
  for (int l = 0; l < 18; ++l) {
    EXPECT_EQ(kinds[size_t(l)], l % 6 == 5 ? LayerKind::global() : LayerKind::sliding(512)) << l;
  }
  EXPECT_EQ(to_string(kinds[0]), "sliding:512");
  EXPECT_EQ(to_string(kinds[5]), "global");
}

// Random chunk sizes and resets, every method and storage format: a sliding layer always holds
// exactly min(seen, window) rows, the newest, whatever the method does to the global layers.
TEST(SlidingLayer, HoldsExactlyItsWindowUnderEveryMethodAndFormat) {
  const std::pair<const char*, const char*> kTypes[] = {{"f16", "f16"},   {"f32", "f32"},     {"q8_0", "q8_0"},
                                                        {"q4_0", "q4_0"}, {"kivi2", "kivi2"}, {"kivi4", "f16"},
                                                        {"f16", "kivi4"}};
  const std::vector<LayerKind> kinds = {LayerKind::sliding(7), LayerKind::global(), LayerKind::sliding(20),
                                        LayerKind::global(), LayerKind::sliding(1)};
  for (const MethodInfo& method : all_methods()) {
    for (const auto& [k, v] : kTypes) {
      KVCacheConfig c = config_for(std::string(method.id), 12);
      c.set("k_type", k);
      c.set("v_type", v);
      c.kivi_group = 8;
      c.kivi_residual = 8;
      // A residual of at most half the budget (KIVI that compresses nothing is refused: core/kivi_storage.cc).
      if (kv_kivi(c.key_type()) || kv_kivi(c.value_type())) c.budget = 16;
      if (reads_param(c, "window")) c.set("window", "4");
      ModelCache cache(c, int(kinds.size()), kHeads, 1, kinds);
      std::vector<int64_t> seen(kinds.size(), 0);
      std::mt19937_64 rng(std::hash<std::string>{}(std::string(method.id) + k + v));
      for (int step = 0; step < 120; ++step) {
        const std::string where = std::string(method.id) + " " + k + "/" + v + " step " + std::to_string(step);
        const int l = int(rng() % kinds.size());
        if (rng() % 40 == 0) {
          cache.reset();
          std::fill(seen.begin(), seen.end(), 0);
        } else {
          const int n = rng() % 4 == 0 ? 1 + int(rng() % 30) : 1;
          update(cache.layer(l), n, rng());
          seen[size_t(l)] += n;
        }
        size_t sliding = 0, evicting = 0;
        for (size_t i = 0; i < kinds.size(); ++i) {
          const LayerCache& layer = cache.layer(int(i));
          ASSERT_EQ(layer.sliding(), kinds[i].is_sliding());
          if (layer.sliding()) {
            expect_window(layer, seen[i], where + " layer " + std::to_string(i));
            ASSERT_FALSE(layer.wants_attention());
            ASSERT_EQ(layer.concentration(), 0.0);
            ASSERT_TRUE(layer.budget_final());
            ASSERT_EQ(layer.layer_budget(), kinds[i].window);
            if (HasFatalFailure()) return;
            sliding += layer.kept_bytes();
          } else {
            evicting += layer.kept_bytes();
          }
        }
        ASSERT_EQ(cache.sliding_kept_bytes(), sliding) << where;
        ASSERT_EQ(cache.evicting_kept_bytes(), evicting) << where;
        ASSERT_EQ(cache.kept_bytes(), sliding + evicting) << where;
      }
    }
  }
}

// A decode step through begin_update / end_update, as the engine drives it: during the update the
// layer also holds the new row (the engine masks each query to its window), after it the window.
TEST(SlidingLayer, DuringAnUpdateHoldsTheNewRowsBesideTheWindow) {
  ModelCache cache(config_for("h2o", 16), 2, kHeads, 1, {LayerKind::sliding(5), LayerKind::global()});
  LayerCache& layer = cache.layer(0);
  update(layer, 9, 1);
  expect_window(layer, 9, "prompt");
  const std::vector<float> k = test::normal(size_t(kHeads) * 3 * kDim, 2), v = test::normal(k.size(), 3);
  layer.begin_update(k.data(), v.data(), 3);
  EXPECT_EQ(layer.tokens_kept(), 5 + 3);
  layer.end_update();
  expect_window(layer, 12, "after");
}

// Row formats: past the window a sliding layer's slots are window + 1 (room for the next row).
TEST(SlidingLayer, ResidentBytesAreTheWindowAndOneAppendSlot) {
  KVCacheConfig c = config_for("full", 16);
  c.kv_type = KVType::q8_0;
  ModelCache cache(c, 2, kHeads, 1, {LayerKind::sliding(40), LayerKind::global()});
  for (int t = 0; t < 100; ++t) {
    update(cache.layer(0), 1, uint64_t(t));
    update(cache.layer(1), 1, uint64_t(t) + 500);
  }
  const size_t row = 2 * kv_row_bytes(KVType::q8_0, kDim);
  EXPECT_EQ(cache.sliding_kept_bytes(), size_t(kHeads) * 41 * row);
  // "full" is what llama.cpp holds: the window in the sliding layer, everything in the global one.
  EXPECT_EQ(cache.layer(1).tokens_kept(), 100);
  EXPECT_EQ(cache.full_bytes(), size_t(kHeads) * (40 + 100) * row);
  EXPECT_EQ(cache.evicting_kept_bytes(), cache.layer(1).kept_bytes());
  EXPECT_EQ(cache.n_sliding(), 1);
  EXPECT_EQ(cache.budgets()[0], 40);
}

// Span positions age rows out of an evicting layer; a sliding layer keeps its window regardless.
TEST(SlidingLayer, SpanAgingLeavesTheWindowWhole) {
  KVCacheConfig c = config_for("h2o", 30);
  c.max_distance = 6;
  ModelCache cache(c, 2, kHeads, 1, {LayerKind::sliding(10), LayerKind::global()});
  for (int t = 0; t < 25; ++t) update(cache.layer(0), 1, uint64_t(t));
  expect_window(cache.layer(0), 25, "span");
}

TEST(SlidingLayer, ALoneSlidingLayerFromTheFactory) {
  auto layer = KVCacheFactory::create(config_for("tova", 8), kHeads, 1, LayerKind::sliding(6));
  for (int t = 0; t < 4; ++t) update(*layer, 3, uint64_t(t));
  expect_window(*layer, 12, "lone");
}

// ---- the allocators over the evicting layers ----

// 9 layers, layers 2, 5 and 8 global.
std::vector<LayerKind> every_third_global(int window) { return periodic_layer_kinds(9, window, 3); }

std::vector<int> global_budgets(const std::vector<int>& budgets, const ModelCache& cache) {
  std::vector<int> out;
  for (int l = 0; l < cache.n_layers(); ++l) {
    if (!cache.layer(l).sliding()) out.push_back(budgets[size_t(l)]);
  }
  return out;
}

std::vector<int> global_budgets(const ModelCache& cache) { return global_budgets(cache.budgets(), cache); }

TEST(SlidingSchedule, UniformGivesEachGlobalLayerTheBudget) {
  ModelCache cache(config_for("h2o", 24), 9, kHeads, 1, every_third_global(64));
  EXPECT_EQ(cache.budgets(), (std::vector<int>{64, 64, 24, 64, 64, 24, 64, 64, 24}));
  EXPECT_EQ(cache.coordinator(), nullptr);
}

TEST(SlidingSchedule, PyramidTapersOverTheGlobalLayers) {
  for (const double beta : {1.5, 2.0, 3.0}) {
    KVCacheConfig c = config_for("pyramidkv", 40);
    c.set("beta", beta);
    ModelCache cache(c, 9, kHeads, 1, every_third_global(512));
    EXPECT_EQ(global_budgets(cache), pyramid_budgets(3, 40, 2, beta)) << beta;
  }
}

// Random models: whatever the kinds, the fixed schedules are those of the global layers alone.
TEST(SlidingSchedule, FixedSchedulesCoverTheGlobalLayersOfRandomModels) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int n_layers = 1 + int(rng() % 40);
    std::vector<LayerKind> kinds;
    for (int l = 0; l < n_layers; ++l) {
      kinds.push_back(rng() % 3 == 0 ? LayerKind::global() : LayerKind::sliding(1 + int(rng() % 600)));
    }
    const int n_global = int(std::count(kinds.begin(), kinds.end(), LayerKind::global()));
    const int budget = 3 + int(rng() % 500);
    const double beta = 1.0 + double(rng() % 100) / 25.0;
    KVCacheConfig c = config_for("pyramidkv", budget);
    c.set("beta", beta);
    ModelCache pyramid(c, n_layers, 1, 1, kinds);
    ModelCache uniform(config_for("tova", budget), n_layers, 1, 1, kinds);
    const std::string where = "trial " + std::to_string(trial);
    for (int l = 0; l < n_layers; ++l) {
      if (kinds[size_t(l)].is_sliding()) {
        ASSERT_EQ(pyramid.budgets()[size_t(l)], kinds[size_t(l)].window) << where;
        ASSERT_EQ(uniform.budgets()[size_t(l)], kinds[size_t(l)].window) << where;
      }
    }
    const std::vector<int> expected = n_global > 0 ? pyramid_budgets(n_global, budget, 2, beta) : std::vector<int>{};
    ASSERT_EQ(global_budgets(pyramid), expected) << where;
    ASSERT_EQ(global_budgets(uniform), std::vector<int>(size_t(n_global), budget)) << where;
    ASSERT_EQ(pyramid.n_sliding(), n_layers - n_global);
  }
}

// Squeeze measures the global layers alone and turns their three measurements into their three
// budgets: the sliding layers' keys (however concentrated) never enter the schedule.
TEST(SlidingSchedule, SqueezeMeasuresAndReallocatesAmongTheGlobalLayers) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    std::vector<std::vector<int>> schedules;
    for (const float sliding_scale : {1.0f, 0.0f, 50.0f}) {
      KVCacheConfig c = config_for("squeeze", 32);
      c.set("strength", 1.0);
      ModelCache cache(c, 9, kHeads, 1, every_third_global(16));
      BudgetCoordinator* coordinator = cache.coordinator();
      ASSERT_NE(coordinator, nullptr);
      EXPECT_EQ(coordinator->n_scheduled(), 3);
      std::vector<double> measured;
      for (int l = 0; l < 9; ++l) {
        std::vector<float> k = test::mock_layer_keys(l, 9, kHeads, 64, kDim, seed * 100 + uint64_t(l));
        if (cache.layer(l).sliding()) {
          for (float& x : k) x *= sliding_scale;  // sliding keys of any kind: never measured
        }
        const std::vector<float> v = test::normal(k.size(), seed * 1000 + uint64_t(l));
        ASSERT_FALSE(coordinator->is_final()) << "final before the last global layer reported";
        cache.layer(l).update(k.data(), v.data(), 64);
        if (!cache.layer(l).sliding()) measured.push_back(cache.layer(l).concentration());
      }
      ASSERT_TRUE(coordinator->is_final());
      const std::vector<int> expected = squeeze_budgets(measured, 32, 2, 1.0);
      EXPECT_EQ(global_budgets(cache.scheduled_budgets(), cache), expected);
      EXPECT_EQ(std::accumulate(expected.begin(), expected.end(), 0), 3 * 32);  // the average over the global layers
      // Each global layer has seen 64 tokens: a budget past that is conserved, handed to the others.
      const std::vector<int> held = global_budgets(cache);
      EXPECT_EQ(held, conserve_budgets(expected, 64));
      EXPECT_EQ(std::accumulate(held.begin(), held.end(), 0), 3 * 32);
      for (int l = 0; l < 9; ++l) {
        if (cache.layer(l).sliding()) {
          EXPECT_EQ(coordinator->measurements()[size_t(l)], 0.0);
          EXPECT_EQ(coordinator->budgets()[size_t(l)], 0);
          EXPECT_FALSE(coordinator->reported(l));
          EXPECT_EQ(cache.layer(l).layer_budget(), 16);
        } else {
          EXPECT_EQ(cache.layer(l).tokens_kept(), std::min(64, cache.layer(l).layer_budget()));
        }
      }
      schedules.push_back(cache.budgets());
      // Reset measures again, the sliding layers still outside.
      cache.reset();
      EXPECT_FALSE(coordinator->is_final());
      EXPECT_EQ(cache.layer(0).layer_budget(), 16);
    }
    EXPECT_EQ(schedules[0], schedules[1]);
    EXPECT_EQ(schedules[0], schedules[2]);
  }
}

// What the engine does for a residual-measuring allocator: it reports every layer; the reports
// of sliding layers are ignored and the schedule covers the scheduled layers' reports alone.
TEST(SlidingSchedule, CoordinatorIgnoresReportsOfLayersItDoesNotSchedule) {
  KVCacheConfig c = config_for("squeeze", 50);
  c.set("strength", 1.0);
  BudgetCoordinator coordinator(4, make_allocator(c), {false, true, false, true});
  coordinator.report(0, 0.99);
  coordinator.report(1, 0.2);
  coordinator.report(2, 0.01);
  EXPECT_FALSE(coordinator.is_final());
  EXPECT_FALSE(coordinator.reported(0));
  coordinator.report(3, 0.8);
  ASSERT_TRUE(coordinator.is_final());
  const std::vector<int> expected = squeeze_budgets(std::vector<double>{0.2, 0.8}, 50, 2, 1.0);
  EXPECT_EQ(coordinator.budgets(), (std::vector<int>{0, expected[0], 0, expected[1]}));
  EXPECT_EQ(coordinator.measurements(), (std::vector<double>{0.0, 0.2, 0.0, 0.8}));
  EXPECT_NE(error_of([&] { coordinator.attach(2, [](int) {}); }).find("layer = 2: is not scheduled"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              BudgetCoordinator(2, make_allocator(c), {false, false});
            }).find("scheduled = no layer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { BudgetCoordinator(2, make_allocator(c), {true}); }).find("scheduled.size() = 1"),
            std::string::npos);
}

TEST(SlidingSchedule, AModelOfSlidingLayersOnlyHasNoSchedule) {
  ModelCache cache(config_for("squeeze", 8), 3, kHeads, 1,
                   {LayerKind::sliding(4), LayerKind::sliding(9), LayerKind::sliding(4)});
  EXPECT_EQ(cache.coordinator(), nullptr);
  EXPECT_EQ(cache.budgets(), (std::vector<int>{4, 9, 4}));
  for (int l = 0; l < 3; ++l) update(cache.layer(l), 12, uint64_t(l));
  for (int l = 0; l < 3; ++l) expect_window(cache.layer(l), 12, "layer " + std::to_string(l));
  EXPECT_EQ(cache.evicting_kept_bytes(), 0u);
}

// With every layer global, the kinds change nothing: the same budgets and rows as without them.
TEST(SlidingSchedule, AllGlobalKindsAreTheDefault) {
  for (const char* method : {"squeeze", "pyramidkv", "h2o"}) {
    auto a = KVCacheBuilder::for_model(4, config_for(method, 20), kHeads);
    auto b = KVCacheBuilder::for_model(4, config_for(method, 20), kHeads, 1, std::vector<LayerKind>(4));
    for (ModelCache* cache : {a.get(), b.get()}) {
      for (int l = 0; l < 4; ++l) {
        const std::vector<float> k = test::mock_layer_keys(l, 4, kHeads, 50, kDim, 3 + uint64_t(l));
        const std::vector<float> v = test::normal(k.size(), 30 + uint64_t(l));
        cache->layer(l).update(k.data(), v.data(), 50);
      }
    }
    EXPECT_EQ(a->budgets(), b->budgets()) << method;
    for (int l = 0; l < 4; ++l) EXPECT_EQ(a->layer(l).fetch(0).positions, b->layer(l).fetch(0).positions);
    EXPECT_EQ(b->sliding_kept_bytes(), 0u);
    EXPECT_EQ(b->layer_kinds(), std::vector<LayerKind>(4));
  }
}

}  // namespace
}  // namespace squeezekv
