// The kvzip policy on a bare layer cache: rows wait unscored through the prompt, a reconstruction
// scores the rows of its chunk by their largest weight and leaves no row of its own, the prompt's
// end keeps the sinks and the best scores, and rows after the prompt push out the lowest context
// rows. The weights come from the test, as the engine would feed them (engine tests run the pass).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "policy/kept_rows.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/cache/model_cache.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv {
namespace {

KVCacheConfig kvzip(int budget, int n_sink) {
  KVCacheConfig c;
  c.method = "kvzip_uniform";
  c.budget = budget;
  c.n_sink = n_sink;
  c.head_dim = 2;
  return c;
}

void feed(LayerCache& cache, int n) {
  for (int i = 0; i < n; ++i) {
    const float key[2] = {float(i), 1.0f}, value[2] = {1.0f, float(i)};
    cache.update(key, value, 1);
  }
}

// One reconstruction of chunk [first, end) whose `n` queries pay the given weights
// ([n, n_slots] over the head's slots, the reconstruction's own rows included).
void reconstruct(LayerCache& cache, int64_t first, int64_t end, const std::vector<std::vector<float>>& weights) {
  cache.begin_reconstruction(first, end);
  const auto n = int(weights.size());
  std::vector<float> keys(size_t(n) * 2, 0.5f), values(size_t(n) * 2, 0.5f);
  cache.begin_update(keys.data(), values.data(), n);
  std::vector<float> probs;
  for (const auto& row : weights) {
    std::vector<float> padded(size_t(cache.head(0).n_slots()), 0.0f);
    std::copy(row.begin(), row.end(), padded.begin());
    probs.insert(probs.end(), padded.begin(), padded.end());
  }
  cache.add_attention(0, probs.data(), n);
  cache.end_update();
  cache.end_reconstruction();
}

TEST(KvzipPolicy, HoldsTheUnscoredPromptThenKeepsTheSinksAndTheBestScores) {
  auto cache = KVCacheFactory::create(kvzip(4, 1));
  cache->begin_prompt();
  feed(*cache, 10);
  EXPECT_EQ(cache->tokens_kept(), 10);  // nothing is scored yet: nothing goes
  // Two queries; a row's score is its larger weight: row 7 0.6, row 2 0.5, row 5 0.4, row 9 0.3.
  reconstruct(*cache, 0, 10,
              {{0.0f, 0.1f, 0.5f, 0.0f, 0.0f, 0.2f, 0.0f, 0.6f, 0.0f, 0.0f},
               {0.0f, 0.0f, 0.1f, 0.0f, 0.0f, 0.4f, 0.0f, 0.1f, 0.0f, 0.3f}});
  EXPECT_EQ(cache->tokens_seen(), 10);  // the reconstruction's rows left again
  EXPECT_EQ(kept(*cache), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_FLOAT_EQ(cache->head(0).scores()[7], 0.6f);
  EXPECT_FLOAT_EQ(cache->head(0).scores()[5], 0.4f);
  cache->end_prompt();
  EXPECT_EQ(kept(*cache), (std::vector<int64_t>{0, 2, 5, 7}));  // sink 0, then 0.6, 0.5, 0.4
  // After the prompt a new row stays and the lowest context row (5) goes.
  feed(*cache, 1);
  EXPECT_EQ(kept(*cache), (std::vector<int64_t>{0, 2, 7, 10}));
}

TEST(KvzipPolicy, ARowOutsideTheChunkKeepsItsScoreAndWaitsWhenUnscored) {
  auto cache = KVCacheFactory::create(kvzip(3, 0));
  cache->begin_prompt();
  feed(*cache, 6);
  reconstruct(*cache, 0, 3, {{0.9f, 0.2f, 0.3f, 0.8f, 0.8f, 0.8f}});  // rows 3-5 are not in the chunk
  const float* s = cache->head(0).scores();
  EXPECT_FLOAT_EQ(s[0], 0.9f);
  EXPECT_TRUE(std::isnan(s[3]) && std::isnan(s[4]) && std::isnan(s[5]));
  reconstruct(*cache, 3, 6, {{0.0f, 0.0f, 0.0f, 0.1f, 0.7f, 0.05f}});
  EXPECT_FLOAT_EQ(cache->head(0).scores()[0], 0.9f);  // scored once, by its own chunk
  EXPECT_FLOAT_EQ(cache->head(0).scores()[4], 0.7f);
  cache->end_prompt();
  EXPECT_EQ(kept(*cache), (std::vector<int64_t>{0, 2, 4}));
}

TEST(KvzipPolicy, AReconstructionMustCoverSeenPositions) {
  auto cache = KVCacheFactory::create(kvzip(3, 0));
  feed(*cache, 4);
  EXPECT_THROW(cache->begin_reconstruction(2, 9), InvalidArgument);
  EXPECT_THROW(cache->begin_reconstruction(3, 3), InvalidArgument);
  EXPECT_THROW(cache->end_reconstruction(), InvalidArgument);
  cache->begin_reconstruction(0, 4);
  EXPECT_THROW(cache->begin_reconstruction(0, 4), InvalidArgument);
}

TEST(KvzipPolicy, SaysWhatItCanDo) {
  const PolicyInfo& p = find_policy("kvzip");
  EXPECT_TRUE(p.holds_prompt_until_end);
  EXPECT_TRUE(p.ranks_across_layers);
  ASSERT_NE(p.reconstruction, nullptr);
  KVCacheConfig c = kvzip(16, 4);
  EXPECT_EQ(context_reconstruction(c)->chunk, 512);
  EXPECT_FALSE(context_reconstruction(c)->streaming);
  c.set("kvzip_mode", "streaming");
  c.set("kvzip_chunk", int64_t(2048));
  EXPECT_TRUE(context_reconstruction(c)->streaming);
  EXPECT_EQ(context_reconstruction(c)->chunk, 2048);
  EXPECT_THROW(c.set("kvzip_chunk", int64_t(8)), InvalidArgument);
  c.method = "h2o";
  EXPECT_FALSE(context_reconstruction(c).has_value());
}

}  // namespace
}  // namespace squeezekv
