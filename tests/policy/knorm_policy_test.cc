// The key-norm policy: the rows with the largest key norms go first, sinks and the recent window
// stay, ties go to the oldest; checked by hand and against a brute-force oracle on random keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "squeezekv/cache/model_cache.h"
#include "squeezekv/methods/registry.h"
#include "policy/kept_rows.h"
#include "test_util.h"

namespace squeezekv {
namespace {

KVCacheConfig knorm(int budget, int n_sink, double recent, int dim = 2) {
  KVCacheConfig c;
  c.method = "knorm";
  c.budget = budget;
  c.n_sink = n_sink;
  c.recent = recent;
  c.head_dim = dim;
  return c;
}

// One row per token whose key is (norm, 0): the norm is the only thing that matters.
void feed(LayerCache& cache, const std::vector<float>& norms) {
  for (float n : norms) {
    const float key[2] = {n, 0.0f}, value[2] = {1.0f, 2.0f};
    cache.update(key, value, 1);
  }
}

TEST(Knorm, KeepsTheSinksAndTheLowestNorms) {
  auto cache = KVCacheFactory::create(knorm(4, 1, 0.0));
  feed(*cache, {5, 1, 3, 2, 4, 0.5f});
  EXPECT_EQ(kept(*cache), (std::vector<int64_t>{0, 1, 3, 5}));  // sink 0, then norms 1, 2, 0.5
  EXPECT_EQ(cache->tokens_kept(), 4);
}

TEST(Knorm, ProtectsTheRecentWindow) {
  // budget 5, 1 sink, recent 0.5: the 2 newest rows stay whatever their norm.
  auto cache = KVCacheFactory::create(knorm(5, 1, 0.5));
  feed(*cache, {5, 1, 3, 2, 4, 0.5f, 9, 8});
  EXPECT_EQ(kept(*cache), (std::vector<int64_t>{0, 1, 5, 6, 7}));
}

TEST(Knorm, TiesGoToTheOldest) {
  auto cache = KVCacheFactory::create(knorm(3, 0, 0.0));
  feed(*cache, {2, 2, 2, 2, 2});
  EXPECT_EQ(kept(*cache), (std::vector<int64_t>{2, 3, 4}));
}

TEST(Knorm, SignAndDirectionDoNotMatterOnlyTheNorm) {
  auto cache = KVCacheFactory::create(knorm(2, 0, 0.0));
  const float keys[3][2] = {{0.0f, -3.0f}, {-1.0f, 0.0f}, {0.6f, 0.8f}}, value[2] = {0, 0};
  for (const auto& k : keys) cache->update(k, value, 1);
  EXPECT_EQ(kept(*cache), (std::vector<int64_t>{1, 2}));  // norms 3, 1, 1
}

// On random keys, each step's kept set equals the oracle's: the sinks, the recent window, and the
// lowest-norm rows of the rest (older first among equal norms), per head.
TEST(Knorm, MatchesABruteForceOracleOnRandomKeys) {
  const int heads = 3, dim = 16, budget = 12, n_sink = 2, steps = 60;
  KVCacheConfig c = knorm(budget, n_sink, 0.25, dim);
  auto cache = KVCacheFactory::create(c, heads);
  std::vector<std::vector<double>> norms(heads);
  for (int t = 0; t < steps; ++t) {
    const auto k = test::normal(size_t(heads * dim), 100 + uint64_t(t)),
               v = test::normal(size_t(heads * dim), 900 + uint64_t(t));
    for (int h = 0; h < heads; ++h) {
      double sum = 0;
      for (int d = 0; d < dim; ++d) sum += double(k[size_t(h * dim + d)]) * k[size_t(h * dim + d)];
      norms[size_t(h)].push_back(std::sqrt(sum));
    }
    cache->update(k.data(), v.data(), 1);
    const int64_t seen = t + 1;
    const int64_t recent = int64_t(std::floor(0.25 * (budget - n_sink)));
    for (int h = 0; h < heads; ++h) {
      std::vector<int64_t> expect, rest;
      for (int64_t p = 0; p < seen; ++p) {
        if (p < n_sink || p >= seen - recent || seen <= budget) expect.push_back(p);
        else rest.push_back(p);
      }
      std::stable_sort(rest.begin(), rest.end(), [&](int64_t a, int64_t b) {
        return float(norms[size_t(h)][size_t(a)]) < float(norms[size_t(h)][size_t(b)]);
      });
      const size_t room = seen <= budget ? 0 : size_t(budget) - expect.size();
      expect.insert(expect.end(), rest.begin(), rest.begin() + long(std::min(room, rest.size())));
      std::sort(expect.begin(), expect.end());
      ASSERT_EQ(kept(*cache, h), expect) << "step " << t << " head " << h;
    }
  }
}

TEST(Knorm, IsARegisteredMethodWithAnyAllocator) {
  EXPECT_EQ(find_method("knorm").policy, "knorm");
  KVCacheConfig c = knorm(16, 2, 0.5, 8);
  c.allocator = "pyramid";
  auto model = KVCacheBuilder::for_model(4, c, 2);
  const std::vector<int> budgets = model->budgets();
  EXPECT_EQ(std::accumulate(budgets.begin(), budgets.end(), 0), 4 * 16);
  EXPECT_FALSE(model->layer(0).wants_attention());
}

}  // namespace
}  // namespace squeezekv
