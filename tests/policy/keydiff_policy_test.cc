// The keydiff policy: over budget, the rows whose keys point most like the mean of the held rows'
// unit keys go first (sinks and the recent window stay, ties to the oldest), the mean taken anew at
// each eviction; checked by hand and against a brute-force oracle on random keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "policy/kept_rows.h"
#include "squeezekv/base/fp16.h"
#include "squeezekv/cache/model_cache.h"
#include "test_util.h"

namespace squeezekv {
namespace {

KVCacheConfig keydiff(int budget, int n_sink, double recent, int dim) {
  KVCacheConfig c;
  c.method = "keydiff";
  c.budget = budget;
  c.n_sink = n_sink;
  c.recent = recent;
  c.head_dim = dim;
  return c;
}

TEST(KeyDiff, TheKeysMostLikeTheMeanDirectionGo) {
  auto cache = KVCacheFactory::create(keydiff(2, 0, 0.0, 2));
  const float keys[3][2] = {{1.0f, 0.0f}, {2.0f, 0.1f}, {0.0f, 1.0f}}, value[2] = {1.0f, 1.0f};
  for (const auto& k : keys) cache->update(k, value, 1);
  // The unit keys' mean points along (0.885, 0.465): the cosines are 0.885, 0.907 and 0.465, so
  // (2, 0.1) goes.
  EXPECT_EQ(kept(*cache), (std::vector<int64_t>{0, 2}));
}

TEST(KeyDiff, MatchesABruteForceOracleOnRandomKeys) {
  const int heads = 2, dim = 8, budget = 10, n_sink = 2, steps = 50;
  auto cache = KVCacheFactory::create(keydiff(budget, n_sink, 0.2, dim), heads);
  std::vector<std::map<int64_t, std::vector<double>>> live(heads);  // position -> key
  for (int t = 0; t < steps; ++t) {
    const auto k = test::normal(size_t(heads * dim), 500 + uint64_t(t)), v = test::normal(size_t(heads * dim), 7);
    cache->update(k.data(), v.data(), 1);
    const int64_t recent = int64_t(std::floor(0.2 * (budget - n_sink)));
    for (int h = 0; h < heads; ++h) {
      // fp16 storage: the oracle reads the keys as the cache stores them.
      std::vector<double> key(static_cast<size_t>(dim));
      for (int d = 0; d < dim; ++d) key[size_t(d)] = double(fp16_to_f32(f32_to_fp16(k[size_t(h * dim + d)])));
      live[size_t(h)][t] = key;
      if (int(live[size_t(h)].size()) <= budget) continue;
      std::vector<double> mean(size_t(dim), 0.0);
      for (const auto& [p, x] : live[size_t(h)]) {
        double n = 0;
        for (double e : x) n += e * e;
        for (int d = 0; d < dim; ++d) mean[size_t(d)] += x[size_t(d)] / std::sqrt(n);
      }
      double mn = 0;
      for (double e : mean) mn += e * e;
      int64_t worst = -1;
      double worst_cos = -2.0;
      for (const auto& [p, x] : live[size_t(h)]) {
        if (p < n_sink || p >= t + 1 - recent) continue;
        double dot = 0, n = 0;
        for (int d = 0; d < dim; ++d) {
          dot += x[size_t(d)] * mean[size_t(d)];
          n += x[size_t(d)] * x[size_t(d)];
        }
        const double c = dot / (std::sqrt(n) * std::sqrt(mn));
        if (c > worst_cos + 1e-6) {  // the oldest wins a tie (the map is in position order)
          worst_cos = c;
          worst = p;
        }
      }
      live[size_t(h)].erase(worst);
      std::vector<int64_t> want;
      for (const auto& [p, x] : live[size_t(h)]) want.push_back(p);
      ASSERT_EQ(kept(*cache, h), want) << "step " << t << " head " << h;
    }
  }
}

}  // namespace
}  // namespace squeezekv
