// The head split (head_split adakv) with the policies that score rows: exact kept rows of each
// method id that uses it on hand-checked inputs, its promises on random inputs (the layer's rows,
// the floor, resident bytes, determinism), and its equivalences (floor 1 is the uniform split).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "squeezekv/alloc/head_split.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/cache/model_cache.h"
#include "squeezekv/methods/registry.h"
#include "policy/kept_rows.h"
#include "policy/policy_test_configs.h"
#include "test_util.h"

namespace squeezekv {
namespace {

using test::decode;
using test::method;

// One 8-token prompt into 2 heads whose last query gives each row a chosen score: head 0 pays
// one old row, head 1 spreads its attention over many (it deserves more rows).
constexpr float kHead0[8] = {0.5f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.2f, 0.3f};
constexpr float kHead1[8] = {0.3f, 0.25f, 0.2f, 0.15f, 0.1f, 0.05f, 0.0f, 0.0f};

void hand_prompt(LayerCache& cache, const float* head0 = kHead0, const float* head1 = kHead1) {
  const std::vector<float> k(2 * 8 * 8, 1.0f), v(2 * 8 * 8, 1.0f);
  cache.begin_update(k.data(), v.data(), 8);
  for (int h = 0; h < 2; ++h) {
    std::vector<float> p(64, 0.0f);
    std::copy(h == 0 ? head0 : head1, (h == 0 ? head0 : head1) + 8, p.begin() + 56);
    cache.add_attention(h, p.data(), 8);
  }
  cache.end_update();
}

KVCacheConfig hand_snapkv(const std::string& id) {
  KVCacheConfig c = method(id, 4, 0);
  c.score = ScoreSource::attention;
  c.set("window", 2);
  c.set("kernel", 1);
  return c;
}

TEST(AdaKV, SharesTheLayersRowsByTheObservationWindowsScores) {
  // Window {6, 7} kept in both heads (4 rows); the other 4 of the layer's 8 are the best prefix
  // rows over both heads: 0.5 (head 0, row 0), then 0.3, 0.25, 0.2 (head 1, rows 0-2).
  auto cache = KVCacheFactory::create(hand_snapkv("adakv"), 2);
  hand_prompt(*cache);
  EXPECT_EQ(kept(*cache, 0), (std::vector<int64_t>{0, 6, 7}));
  EXPECT_EQ(kept(*cache, 1), (std::vector<int64_t>{0, 1, 2, 6, 7}));
  // The uniform split keeps 2 prefix rows a head (ties to the newest: row 5 of head 0).
  auto uniform = KVCacheFactory::create(hand_snapkv("snapkv"), 2);
  hand_prompt(*uniform);
  EXPECT_EQ(kept(*uniform, 0), (std::vector<int64_t>{0, 5, 6, 7}));
  EXPECT_EQ(kept(*uniform, 1), (std::vector<int64_t>{0, 1, 6, 7}));
  // After the prompt each head keeps its own count, the oldest rows out first.
  decode(*cache, 2, 40);
  EXPECT_EQ(kept(*cache, 0), (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(kept(*cache, 1), (std::vector<int64_t>{2, 6, 7, 8, 9}));
}

TEST(AdaKV, TheFloorHoldsWhenAHeadScoresLowest) {
  // Head 0's prefix rows all score below head 1's best four.
  constexpr float low[8] = {0.01f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.2f, 0.3f};
  KVCacheConfig c = hand_snapkv("adakv");
  c.head_floor = 0.0;
  auto bare = KVCacheFactory::create(c, 2);
  hand_prompt(*bare, low);
  EXPECT_EQ(kept(*bare, 0), (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(kept(*bare, 1), (std::vector<int64_t>{0, 1, 2, 3, 6, 7}));
  // Floor 0.75: every head keeps ceil(0.75 x 4) = 3 rows, head 0 its window and its best row.
  c.head_floor = 0.75;
  auto floored = KVCacheFactory::create(c, 2);
  hand_prompt(*floored, low);
  EXPECT_EQ(kept(*floored, 0), (std::vector<int64_t>{0, 6, 7}));
  EXPECT_EQ(kept(*floored, 1), (std::vector<int64_t>{0, 1, 2, 6, 7}));
  c.head_floor = 1.0;  // the uniform split
  auto uniform = KVCacheFactory::create(c, 2);
  hand_prompt(*uniform);
  EXPECT_EQ(kept(*uniform, 0), (std::vector<int64_t>{0, 5, 6, 7}));
  EXPECT_EQ(kept(*uniform, 1), (std::vector<int64_t>{0, 1, 6, 7}));
}

TEST(AdaKV, SqueezeAdaKVOnOneLayerIsAdaKV) {
  // One layer: squeeze gives it the average budget, so the kept rows are adakv's.
  KVCacheConfig c = hand_snapkv("squeeze_adakv");
  auto model = KVCacheBuilder::for_model(1, c, 2);
  hand_prompt(model->layer(0));
  EXPECT_EQ(kept(model->layer(0), 0), (std::vector<int64_t>{0, 6, 7}));
  EXPECT_EQ(kept(model->layer(0), 1), (std::vector<int64_t>{0, 1, 2, 6, 7}));
  auto snap = KVCacheBuilder::for_model(1, hand_snapkv("squeeze_snapkv"), 2);
  hand_prompt(snap->layer(0));
  EXPECT_EQ(kept(snap->layer(0), 0), (std::vector<int64_t>{0, 5, 6, 7}));
  EXPECT_EQ(kept(snap->layer(0), 1), (std::vector<int64_t>{0, 1, 6, 7}));
}

TEST(AdaKV, H2OAdaKVSharesByCumulativeScore) {
  KVCacheConfig c = method("h2o_adakv", 4, 0);
  c.score = ScoreSource::attention;
  c.recent = 0.0;
  auto cache = KVCacheFactory::create(c, 2);
  hand_prompt(*cache);
  // The layer's best 8 of 16 rows: head 1's 0.3, 0.25, 0.2, 0.15, 0.1 (rows 0-4), head 0's 0.5,
  // 0.3, 0.2 (rows 0, 7, 6). Floor ceil(0.2 x 4) = 1 binds neither head.
  EXPECT_EQ(kept(*cache, 0), (std::vector<int64_t>{0, 6, 7}));
  EXPECT_EQ(kept(*cache, 1), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  c.method = "h2o";
  auto uniform = KVCacheFactory::create(c, 2);
  hand_prompt(*uniform);
  EXPECT_EQ(kept(*uniform, 0), (std::vector<int64_t>{0, 5, 6, 7}));
  EXPECT_EQ(kept(*uniform, 1), (std::vector<int64_t>{0, 1, 2, 3}));
}

// ---- promises on random inputs ----

struct Case {
  std::string method;
  std::string policy;  // "" = the method's
};

// Rows held over the heads of each sequence, the floor, and resident bytes after every update.
void check_layer(const LayerCache& cache, int budget, int n_kv) {
  const int floor = head_floor_rows(cache.config().head_floor, budget);
  const int64_t seen = cache.tokens_seen();
  for (int b = 0; b < cache.n_heads() / n_kv; ++b) {
    int64_t held = 0;
    for (int h = b * n_kv; h < (b + 1) * n_kv; ++h) {
      const HeadStore& head = cache.head(h);
      held += head.n_live();
      ASSERT_GE(head.n_live(), std::min<int64_t>(seen, floor)) << "head " << h;
      // Resident bytes: the rows held and one slot for the next append (until the layer is
      // full, room up to the layer's budget + 1, as under the uniform split).
      ASSERT_LE(head.capacity(), seen < budget ? budget + 1 : head.n_live() + 1) << "head " << h;
    }
    ASSERT_EQ(held, std::min<int64_t>(seen, budget) * n_kv) << "batch item " << b;
  }
  ASSERT_EQ(cache.kept_bytes(), [&] {
    size_t rows = 0;
    for (int h = 0; h < cache.n_heads(); ++h) rows += size_t(cache.head(h).capacity());
    return rows * kv_token_bytes(cache.config());
  }());
  ASSERT_LE(cache.kept_bytes(), size_t(cache.n_heads()) * size_t(budget + 1) * kv_token_bytes(cache.config()));
}

TEST(AdaKV, TheLayerHoldsItsRowsAfterEveryEviction) {
  for (const std::string id : {"h2o", "chunkkv", "knorm"}) {
    for (ScoreSource score : {ScoreSource::key_proxy, ScoreSource::attention}) {
      for (double floor : {0.0, 0.2, 0.6}) {
        KVCacheConfig c = method(id, 12, 2);
        c.head_split = "adakv";
        c.head_floor = floor;
        c.score = score;
        c.decay = 0.95;
        const int n_kv = 3;
        auto cache = KVCacheFactory::create(c, n_kv, 2);
        uint64_t seed = 7;
        for (int step = 0; step < 40; ++step) {
          const int n = step == 0 ? 9 : 1 + int(seed % 3);
          const auto k = test::normal(size_t(cache->n_heads() * n * 8), seed++),
                     v = test::normal(size_t(cache->n_heads() * n * 8), seed++);
          cache->begin_update(k.data(), v.data(), n);
          if (cache->wants_attention()) {
            for (int h = 0; h < cache->n_heads(); ++h) {
              const HeadStore& head = cache->head(h);
              std::vector<float> p(size_t(n) * size_t(head.n_slots()), 0.0f);
              for (size_t i = 0; i < p.size(); ++i) {
                p[i] = head.live(int(i % size_t(head.n_slots()))) ? float((i * 7 + size_t(h)) % 11) / 50.0f : 0.0f;
              }
              cache->add_attention(h, p.data(), n);
            }
          }
          cache->end_update();
          ASSERT_NO_FATAL_FAILURE(check_layer(*cache, 12, n_kv)) << id << " floor " << floor << " step " << step;
        }
      }
    }
  }
}

// (Not chunkkv: its own eviction drops whole chunks and may hold fewer rows than its budget.)
TEST(AdaKV, FloorOneIsTheUniformSplit) {
  for (const std::string id : {"h2o", "knorm"}) {
    KVCacheConfig c = method(id, 10, 2);
    c.decay = 0.9;
    auto uniform = KVCacheFactory::create(c, 3);
    c.head_split = "adakv";
    c.head_floor = 1.0;
    auto split = KVCacheFactory::create(c, 3);
    uint64_t seed = 3;
    for (int step = 0; step < 30; ++step) {
      const int n = step == 0 ? 16 : 1;
      const auto k = test::normal(size_t(3 * n * 8), seed++), v = test::normal(size_t(3 * n * 8), seed++);
      uniform->update(k.data(), v.data(), n);
      split->update(k.data(), v.data(), n);
      for (int h = 0; h < 3; ++h) ASSERT_EQ(kept(*split, h), kept(*uniform, h)) << id << " step " << step;
    }
  }
}

TEST(AdaKV, HeadsGetDifferentCountsAndRunsRepeatExactly) {
  auto run = [] {
    KVCacheConfig c = method("h2o_adakv", 8, 1);
    c.head_floor = 0.0;
    auto cache = KVCacheFactory::create(c, 4);
    decode(*cache, 50, 11);
    std::vector<std::vector<int64_t>> out;
    for (int h = 0; h < 4; ++h) out.push_back(kept(*cache, h));
    return out;
  };
  const auto a = run();
  EXPECT_EQ(a, run());
  std::vector<size_t> counts;
  for (const auto& rows : a) counts.push_back(rows.size());
  EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), size_t(0)), 32u);
  EXPECT_NE(*std::min_element(counts.begin(), counts.end()), *std::max_element(counts.begin(), counts.end()));
}

// What the reports count: rows per head on average is the budget the split shares, while the
// fullest head holds more than that; without the split the two agree.
TEST(AdaKV, RowsPerHeadIsTheBudgetTheHeadsShare) {
  KVCacheConfig c = method("h2o_adakv", 8, 1);
  c.head_floor = 0.0;
  auto split = KVCacheFactory::create(c, 4);
  decode(*split, 50, 11);
  EXPECT_EQ(split->rows_per_head(), 8);
  EXPECT_GT(split->tokens_kept(), 8);
  auto uniform = KVCacheFactory::create(method("h2o", 8, 1), 4);
  decode(*uniform, 50, 11);
  EXPECT_EQ(uniform->rows_per_head(), 8);
  EXPECT_EQ(uniform->tokens_kept(), 8);
  // Fewer rows than the heads: rounded up, never below what a head holds on average.
  auto short_split = KVCacheFactory::create(c, 4);
  decode(*short_split, 3, 11);
  EXPECT_EQ(short_split->rows_per_head(), 3);
}

// Under squeeze (and pyramid) the snapkv methods compress each layer to its own published budget:
// exactly what a lone layer of that budget keeps from the same rows.
TEST(AdaKV, SnapKVUnderLayerAllocatorsMatchesALoneLayerOfItsBudget) {
  for (const std::string id : {"squeeze_snapkv", "squeeze_adakv", "pyramid"}) {
    KVCacheConfig c = method(id == "pyramid" ? "adakv" : id, 12, 2);
    if (id == "pyramid") c.allocator = "pyramid";
    c.set("window", 3);
    const int n_layers = 4, n_kv = 2, n = 40;
    auto model = KVCacheBuilder::for_model(n_layers, c, n_kv);
    std::vector<std::vector<float>> ks, vs;
    for (int l = 0; l < n_layers; ++l) {
      // Layers differ in how their keys point (a shared direction, stronger deeper), so squeeze
      // measures different concentrations.
      std::vector<float> k = test::normal(size_t(n_kv * n * 8), 100 + uint64_t(l));
      for (float& x : k) x += 0.6f * float(l);
      ks.push_back(k);
      vs.push_back(test::normal(size_t(n_kv * n * 8), 200 + uint64_t(l)));
    }
    for (int l = 0; l < n_layers; ++l) model->layer(l).update(ks[size_t(l)].data(), vs[size_t(l)].data(), n);
    std::vector<int> budgets;
    for (int l = 0; l < n_layers; ++l) {
      const LayerCache& layer = model->layer(l);
      ASSERT_TRUE(layer.budget_final());
      budgets.push_back(layer.layer_budget());
      KVCacheConfig lone = c;
      lone.method = resolved_head_split(c) == "adakv" ? "adakv" : "snapkv";
      lone.allocator.clear();
      lone.resolved_budget = layer.layer_budget();
      auto alone = KVCacheFactory::create(lone, n_kv);
      alone->update(ks[size_t(l)].data(), vs[size_t(l)].data(), n);
      int64_t held = 0;
      for (int h = 0; h < n_kv; ++h) {
        EXPECT_EQ(kept(layer, h), kept(*alone, h)) << id << " layer " << l << " head " << h;
        held += layer.head(h).n_live();
      }
      EXPECT_EQ(held, int64_t(layer.layer_budget()) * n_kv) << id << " layer " << l;
    }
    EXPECT_NE(*std::min_element(budgets.begin(), budgets.end()), *std::max_element(budgets.begin(), budgets.end()))
        << id;
  }
}

TEST(AdaKV, RefusedWithAPolicyWithoutScores) {
  KVCacheConfig c = method("window", 8, 0);
  c.head_split = "adakv";
  EXPECT_THROW(KVCacheBuilder::for_model(2, c, 2), InvalidArgument);
  c.method = "tova";
  EXPECT_THROW(c.validate(), InvalidArgument);
  c.method = "h2o";
  c.head_floor = 2.0;
  EXPECT_THROW(c.validate(), InvalidArgument);
}

}  // namespace
}  // namespace squeezekv
