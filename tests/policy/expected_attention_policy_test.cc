// The expected-attention policy on a bare layer cache, fed queries by hand: the coming query's mean
// and covariance turned by RoPE averaged over the next positions, a softmax over the rows times the
// value norm, the sinks' queries left out; the prompt is held until it ends.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <vector>

#include "policy/kept_rows.h"
#include "squeezekv/base/fp16.h"
#include "squeezekv/cache/model_cache.h"

namespace squeezekv {
namespace {

KVCacheConfig expected(int budget, const char* covariance) {
  KVCacheConfig c;
  c.method = "expected_attention";
  c.budget = budget;
  c.n_sink = 1;
  c.recent = 0.0;
  c.head_dim = 2;
  c.set("ea_future", int64_t(8));
  c.set("ea_covariance", covariance);
  return c;
}

constexpr float kBase = 100.0f, kScale = 0.5f;

// The mean turn of one pair over positions [from, from + 8) at base 100, n_rot 2: theta = 1.
std::pair<double, double> mean_turn(int64_t from) {
  double c = 0, s = 0;
  for (int t = 0; t < 8; ++t) {
    c += std::cos(double(from + t));
    s += std::sin(double(from + t));
  }
  return {c / 8, s / 8};
}

// Six rows, the queries of each token given before its row: token 0's (a sink's) is left out.
std::unique_ptr<LayerCache> run(const char* covariance, const std::vector<std::array<float, 2>>& queries,
                                std::vector<std::array<float, 2>>& keys, std::vector<std::array<float, 2>>& values,
                                int budget) {
  auto cache = KVCacheFactory::create(expected(budget, covariance));
  cache->begin_prompt();
  for (size_t t = 0; t < keys.size(); ++t) {
    cache->begin_update(keys[t].data(), values[t].data(), 1);
    cache->add_queries({queries[t].data(), 1, 1, 2, int64_t(t), RopeStyle::normal, 2, kBase, kScale});
    cache->end_update();
  }
  EXPECT_EQ(cache->tokens_kept(), int(keys.size()));  // held until the prompt ends
  cache->end_prompt();
  return cache;
}

double norm(const std::array<float, 2>& v) {
  const double a = fp16_round(v[0]), b = fp16_round(v[1]);
  return std::sqrt(a * a + b * b);
}

TEST(ExpectedAttention, TheMeanQueryTurnedAheadScoresTheRows) {
  std::vector<std::array<float, 2>> keys = {{9, 9}, {1, 0}, {0, 1}, {-1, 0}, {0.5f, 0.5f}, {0, -1}};
  std::vector<std::array<float, 2>> values = {{1, 0}, {1, 0}, {0, 2}, {3, 0}, {1, 1}, {0, 1}};
  // Every query (after the sink's) is (2, 0): no covariance; the sink's (-50, 0) is left out.
  std::vector<std::array<float, 2>> queries(6, {2, 0});
  queries[0] = {-50, 0};
  auto cache = run("on", queries, keys, values, 6);
  const auto [c, s] = mean_turn(6);
  const double mx = 2 * c, my = 2 * s;  // R mu
  std::vector<double> logits;
  double z = 0;
  for (const auto& k : keys) {
    logits.push_back(kScale * (mx * fp16_round(k[0]) + my * fp16_round(k[1])));
    z += std::exp(logits.back());
  }
  const HeadStore& head = cache->head(0);
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(head.scores()[i], std::exp(logits[size_t(i)]) / z * norm(values[size_t(i)]), 1e-5) << i;
  }
}

TEST(ExpectedAttention, TheCovarianceAddsHalfTheVarianceOfTheLogit) {
  std::vector<std::array<float, 2>> keys = {{0, 0}, {1, 0}, {0, 1}, {1, 1}, {2, -1}};
  std::vector<std::array<float, 2>> values(5, {1, 0});
  // Queries (3, 0) and (-3, 0) in turn: mean 0, covariance diag(9, 0); turned, the logit's variance
  // is 9 (c k0 + s k1)^2 scale^2.
  std::vector<std::array<float, 2>> queries = {{0, 0}, {3, 0}, {-3, 0}, {3, 0}, {-3, 0}};
  auto cache = run("on", queries, keys, values, 5);
  const auto [c, s] = mean_turn(5);
  std::vector<double> logits;
  double z = 0;
  for (const auto& k : keys) {
    const double proj = c * k[0] + s * k[1];
    logits.push_back(kScale * kScale * 9.0 * proj * proj / 2.0);
    z += std::exp(logits.back());
  }
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(cache->head(0).scores()[i], std::exp(logits[size_t(i)]) / z, 1e-5) << i;
  // Without the covariance every row expects the same weight (the mean query is zero).
  auto flat = run("off", queries, keys, values, 5);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(flat->head(0).scores()[i], 0.2, 1e-6) << i;
}

TEST(ExpectedAttention, KeepsTheSinkAndTheBestScoresAtThePromptsEnd) {
  std::vector<std::array<float, 2>> keys = {{0, 0}, {1, 0}, {0, 1}, {-1, 0}, {0, -1}, {0.7f, 0.7f}};
  std::vector<std::array<float, 2>> values(6, {1, 0});
  std::vector<std::array<float, 2>> queries(6, {4, 0});
  auto all = run("on", queries, keys, values, 6);
  auto cache = run("on", queries, keys, values, 3);
  std::vector<std::pair<float, int64_t>> rest;
  for (int i = 1; i < 6; ++i) rest.emplace_back(all->head(0).scores()[i], i);
  std::sort(rest.rbegin(), rest.rend());
  std::vector<int64_t> want = {0, rest[0].second, rest[1].second};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(kept(*cache), want);
}

}  // namespace
}  // namespace squeezekv
