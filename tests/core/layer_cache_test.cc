#include "squeezekv/cache/layer_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/h2o_oracle.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/cache/model_cache.h"
#include "test_util.h"

namespace squeezekv {
namespace {

KVCacheConfig h2o(int budget, int n_sink, int dim = 16) {
  KVCacheConfig c;
  c.method = "h2o";
  c.budget = budget;
  c.n_sink = n_sink;
  c.head_dim = dim;
  c.decay = 1.0;  // the reference library's scoring, which the oracle implements
  return c;
}

std::vector<int64_t> sorted_positions(const HeadStore& head) {
  std::vector<int64_t> out;
  for (int s : head.slots_by_position()) out.push_back(head.positions()[s]);
  return out;
}

TEST(LayerCache, FirstRowOfAnEmptyHeadScoresOne) {
  auto cache = KVCacheFactory::create(h2o(8, 2));
  const std::vector<float> k = test::normal(16, 1), v = test::normal(16, 2);
  cache->update(k.data(), v.data(), 1);
  ASSERT_EQ(cache->tokens_kept(), 1);
  EXPECT_EQ(cache->head(0).scores()[0], 1.0f);
}

TEST(LayerCache, MatchesThePlainOracleRowsAndScores) {
  for (double recent : {0.0, 0.5}) {
    for (KVType type : {KVType::f16, KVType::f32}) {
      KVCacheConfig c = h2o(24, 3);
      c.recent = recent;
      c.kv_type = type;
      auto cache = KVCacheFactory::create(c);
      test::H2OOracle oracle(24, 3, recent, type);
      uint64_t seed = 10;
      // A prefill of 40 tokens, then 60 single-token decode steps.
      for (int step = 0; step < 61; ++step) {
        const int n = step == 0 ? 40 : 1;
        const std::vector<float> k = test::normal(size_t(n * 16), seed++), v = test::normal(size_t(n * 16), seed++);
        cache->update(k.data(), v.data(), n);
        oracle.update(k.data(), n, 16);
        ASSERT_EQ(sorted_positions(cache->head(0)), oracle.positions()) << "step " << step;
        const HeadStore& head = cache->head(0);
        const std::vector<int> slots = head.slots_by_position();
        for (size_t i = 0; i < slots.size(); ++i) {
          EXPECT_NEAR(head.scores()[slots[i]], oracle.rows()[i].score, 2e-5);
        }
      }
    }
  }
}

TEST(LayerCache, BudgetNeverExceededAndSinksKeptUnderStress) {
  for (int n_sink : {0, 1, 4}) {
    auto cache = KVCacheFactory::create(h2o(12, n_sink), 3);
    uint64_t seed = 100;
    for (int step = 0; step < 40; ++step) {
      const int n = 1 + int(seed % 7);
      const auto k = test::normal(size_t(3 * n * 16), seed++), v = test::normal(size_t(3 * n * 16), seed++);
      cache->update(k.data(), v.data(), n);
      for (int h = 0; h < 3; ++h) {
        const HeadStore& head = cache->head(h);
        ASSERT_LE(head.n_live(), 12);
        const auto pos = sorted_positions(head);
        for (int s = 0; s < std::min<int64_t>(n_sink, cache->tokens_seen()); ++s) {
          ASSERT_TRUE(std::count(pos.begin(), pos.end(), s)) << "sink " << s << " lost";
        }
        for (int s = 0; s < head.n_slots(); ++s) {
          if (head.live(s)) {
            ASSERT_GE(head.scores()[s], 0.0f);
          }
        }
      }
    }
  }
}

// PositionRule::span: after every update no non-sink row lies more than max_distance behind the
// next token, for every policy that bounds its rows, and the budget and sinks hold as before.
// Under the text rule the same updates keep older rows (the check is not vacuous).
TEST(LayerCache, SpanRuleEvictsRowsOlderThanTheDistance) {
  // Returns how many (step, head) pairs held a non-sink row farther back than 30.
  auto run = [](const char* method, PositionRule rule) {
    KVCacheConfig c = h2o(24, 3);
    c.method = method;
    c.positions = rule;
    c.max_distance = 30;
    auto cache = KVCacheFactory::create(c, 3);
    uint64_t seed = 7;
    int far = 0;
    for (int step = 0; step < 60; ++step) {
      const int n = 1 + int(seed % 5);
      const auto k = test::normal(size_t(3 * n * 16), seed++), v = test::normal(size_t(3 * n * 16), seed++);
      cache->update(k.data(), v.data(), n);
      for (int h = 0; h < 3; ++h) {
        const auto pos = sorted_positions(cache->head(h));
        EXPECT_LE(int(pos.size()), 24);
        for (int64_t s = 0; s < std::min<int64_t>(3, cache->tokens_seen()); ++s) {
          EXPECT_TRUE(std::count(pos.begin(), pos.end(), s)) << "sink " << s << " lost";
        }
        far += int(std::count_if(pos.begin(), pos.end(),
                                 [&](int64_t p) { return p >= 3 && p < cache->tokens_seen() - 30; }) > 0);
      }
      if (std::string(method) == "tova") {  // one selection for all heads: slots still match
        for (int h = 1; h < 3; ++h) {
          for (int s = 0; s < cache->head(0).n_slots(); ++s) {
            EXPECT_EQ(cache->head(h).positions()[s], cache->head(0).positions()[s]);
          }
        }
      }
    }
    return far;
  };
  for (const char* method : {"h2o", "tova", "chunkkv", "knorm"}) {
    SCOPED_TRACE(method);
    EXPECT_EQ(run(method, PositionRule::span), 0);
    EXPECT_GT(run(method, PositionRule::text), 0);
  }
}

TEST(LayerCache, BudgetPlusOneLeavesExactlyTheBudget) {
  auto cache = KVCacheFactory::create(h2o(10, 2));
  const auto k = test::normal(11 * 16, 5), v = test::normal(11 * 16, 6);
  cache->update(k.data(), v.data(), 11);
  EXPECT_EQ(cache->tokens_kept(), 10);
  EXPECT_EQ(cache->tokens_seen(), 11);
}

TEST(LayerCache, RecentZeroFreezesOnThePromptAsTheReferenceDid) {
  KVCacheConfig c = h2o(64, 4, 32);
  c.recent = 0.0;
  auto cache = KVCacheFactory::create(c);
  const auto k = test::normal(256 * 32, 1), v = test::normal(256 * 32, 2);
  cache->update(k.data(), v.data(), 256);
  for (int step = 0; step < 20; ++step) {
    const auto kd = test::normal(32, 50 + uint64_t(step)), vd = test::normal(32, 90 + uint64_t(step));
    cache->update(kd.data(), vd.data(), 1);
    // The newest row enters with score 0 and is evicted at once.
    const auto pos = sorted_positions(cache->head(0));
    EXPECT_EQ(std::count(pos.begin(), pos.end(), 256 + step), 0);
  }
}

TEST(LayerCache, DefaultRecentWindowKeepsDecodeTokens) {
  KVCacheConfig c = h2o(64, 4, 32);  // recent 0.5: the newest 30 rows are protected
  auto cache = KVCacheFactory::create(c);
  const auto k = test::normal(256 * 32, 1), v = test::normal(256 * 32, 2);
  cache->update(k.data(), v.data(), 256);
  for (int step = 0; step < 20; ++step) {
    const auto kd = test::normal(32, 50 + uint64_t(step)), vd = test::normal(32, 90 + uint64_t(step));
    cache->update(kd.data(), vd.data(), 1);
  }
  const auto pos = sorted_positions(cache->head(0));
  for (int64_t p = 276 - 30; p < 276; ++p) EXPECT_EQ(std::count(pos.begin(), pos.end(), p), 1) << p;
}

TEST(LayerCache, ByteAccountingFollowsResidentSlots) {
  KVCacheConfig c = h2o(32, 4, 16);
  auto cache = KVCacheFactory::create(c, 2);
  const auto k = test::normal(2 * 100 * 16, 1), v = test::normal(2 * 100 * 16, 2);
  cache->update(k.data(), v.data(), 100);
  const size_t row = 16 * 2;  // f16
  EXPECT_EQ(cache->full_bytes(), 2 * 100 * 2 * row);
  // After eviction each head keeps budget + 1 slots (room for the next append).
  EXPECT_EQ(cache->kept_bytes(), 2 * 33 * 2 * row);
  EXPECT_DOUBLE_EQ(cache->compression_ratio(), 100.0 / 33.0);
}

TEST(LayerCache, EmptyCacheRatioIsOne) {
  auto cache = KVCacheFactory::create(h2o(32, 4));
  EXPECT_EQ(cache->compression_ratio(), 1.0);
  EXPECT_EQ(cache->kept_bytes(), 0u);
}

TEST(LayerCache, ResolvedBudgetOverridesTheAverage) {
  KVCacheConfig c = h2o(32, 4);
  c.method = "squeeze";
  c.resolved_budget = 9;
  auto cache = KVCacheFactory::create(c);
  const auto k = test::normal(50 * 16, 1), v = test::normal(50 * 16, 2);
  cache->update(k.data(), v.data(), 50);
  EXPECT_EQ(cache->layer_budget(), 9);
  EXPECT_EQ(cache->tokens_kept(), 9);
}

TEST(LayerCache, AttentionSourceAccumulatesTheGivenProbabilities) {
  KVCacheConfig c = h2o(3, 0, 4);
  c.score = ScoreSource::attention;
  c.recent = 0.0;
  auto cache = KVCacheFactory::create(c);
  ASSERT_TRUE(cache->wants_attention());
  const std::vector<float> k(16, 1.0f), v(16, 1.0f);
  cache->begin_update(k.data(), v.data(), 4);
  // Four queries over four slots (causal); row 2 gets the least attention overall.
  const std::vector<float> probs = {1, 0, 0, 0, 0.5f, 0.5f, 0, 0, 0.4f, 0.4f, 0.2f, 0, 0.3f, 0.3f, 0.1f, 0.3f};
  cache->add_attention(0, probs.data(), 4);
  cache->end_update();
  EXPECT_EQ(sorted_positions(cache->head(0)), (std::vector<int64_t>{0, 1, 3}));
  const HeadStore& head = cache->head(0);
  EXPECT_FLOAT_EQ(head.scores()[0], 2.2f);
  EXPECT_FLOAT_EQ(head.scores()[3], 0.3f);
}

TEST(LayerCache, DecayScalesOlderAttention) {
  KVCacheConfig c = h2o(8, 0, 4);
  c.score = ScoreSource::attention;
  c.decay = 0.5;
  auto cache = KVCacheFactory::create(c);
  const std::vector<float> k(8, 1.0f), v(8, 1.0f);
  cache->begin_update(k.data(), v.data(), 2);
  const std::vector<float> probs = {1, 0, 0.5f, 0.5f};
  cache->add_attention(0, probs.data(), 2);
  cache->end_update();
  EXPECT_FLOAT_EQ(cache->head(0).scores()[0], 0.5f * 1.0f + 0.5f);
  EXPECT_FLOAT_EQ(cache->head(0).scores()[1], 0.5f);
}

TEST(LayerCache, BadInputIsRejectedWithTheParameterNamed) {
  auto cache = KVCacheFactory::create(h2o(8, 2, 4));
  std::vector<float> k(8, 1.0f), v(8, 1.0f);
  k[5] = std::nanf("");
  try {
    cache->update(k.data(), v.data(), 2);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("keys[5]"), std::string::npos) << e.what();
  }
  k[5] = INFINITY;
  EXPECT_THROW(cache->update(k.data(), v.data(), 2), InvalidArgument);
  k[5] = 1.0f;
  v[0] = -INFINITY;
  EXPECT_THROW(cache->update(k.data(), v.data(), 2), InvalidArgument);
  v[0] = 1.0f;
  EXPECT_THROW(cache->update(k.data(), v.data(), 0), InvalidArgument);
  KVBlockView kb{k.data(), 1, 1, 2, 8}, vb{v.data(), 1, 1, 2, 8};
  try {
    cache->update(kb, vb);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("keys.head_dim = 8"), std::string::npos) << e.what();
  }
  kb = {k.data(), 1, 2, 1, 4};
  vb = {v.data(), 1, 2, 1, 4};
  EXPECT_THROW(cache->update(kb, vb), InvalidArgument);  // 2 heads, cache has 1
  kb = {k.data(), 1, 1, 2, 4};
  vb = {v.data(), 1, 1, 1, 4};
  EXPECT_THROW(cache->update(kb, vb), InvalidArgument);  // seq mismatch
  EXPECT_NO_THROW(cache->update(KVBlockView{k.data(), 1, 1, 2, 4}, KVBlockView{v.data(), 1, 1, 2, 4}));
}

TEST(KVCacheConfig, RejectsEachBadFieldByName) {
  auto expect_bad = [](KVCacheConfig c, const std::string& field) {
    try {
      c.validate();
      ADD_FAILURE() << "accepted bad " << field;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()).rfind(field + " = ", 0), 0u) << e.what();
    }
  };
  KVCacheConfig c;
  c.budget = 4;
  expect_bad(c, "budget");
  c = {};
  c.params["strength"] = 1.01;  // bypasses set()'s own range check
  expect_bad(c, "strength");
  c = {};
  c.recent = -0.1;
  expect_bad(c, "recent");
  c = {};
  c.decay = 0.0;
  expect_bad(c, "decay");
  c = {};
  c.decay = 1.5;
  expect_bad(c, "decay");
  c = {};
  c.method = "h3o";
  expect_bad(c, "method");
  c = {};
  c.head_dim = 0;
  expect_bad(c, "head_dim");
  c = {};
  c.resolved_budget = 2;
  expect_bad(c, "resolved_budget");
  EXPECT_NO_THROW(KVCacheConfig{}.validate());
}

// Values enter the cache checked: an f16 cache cannot hold a finite f32 beyond 65504 (it would
// store inf), and attention fed back must be finite and non-negative.
TEST(LayerCacheInput, F32BeyondTheFp16RangeIsRejectedByAnF16Cache) {
  KVCacheConfig c = h2o(8, 2, 4);
  std::vector<float> k(4, 1.0f), v(4, 1.0f);
  k[2] = 70000.0f;
  auto f16 = KVCacheFactory::create(c, 1);
  try {
    f16->update(k.data(), v.data(), 1);
    FAIL() << "accepted 70000 into an f16 cache";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("keys[2] = 70000"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fp16 range"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layer 0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(f16->tokens_seen(), 0);
  k[2] = 65504.0f;  // the largest f16 is fine
  EXPECT_NO_THROW(f16->update(k.data(), v.data(), 1));
  v[0] = -1e6f;
  EXPECT_THROW(f16->update(k.data(), v.data(), 1), InvalidArgument);
  c.kv_type = KVType::f32;  // an f32 cache holds it
  auto f32 = KVCacheFactory::create(c, 1);
  EXPECT_NO_THROW(f32->update(k.data(), v.data(), 1));
}

TEST(LayerCacheInput, AttentionMustBeFiniteAndNonNegative) {
  KVCacheConfig c = h2o(8, 2, 4);
  c.set("score", std::string("attention"));
  auto layer = KVCacheFactory::create(c, 1);
  const std::vector<float> k = test::normal(4, 1);
  for (float bad : {std::nanf(""), -0.5f, INFINITY}) {
    layer->begin_update(k.data(), k.data(), 1);
    std::vector<float> probs(size_t(layer->head(0).n_slots()), 0.0f);
    probs[0] = bad;
    EXPECT_THROW(layer->add_attention(0, probs.data(), 1), InvalidArgument) << bad;
    probs[0] = 1.0f;
    EXPECT_NO_THROW(layer->add_attention(0, probs.data(), 1));
    layer->end_update();
  }
}

TEST(LayerCacheInput, AbsurdHeadAndBatchCountsFailBeforeAllocating) {
  EXPECT_THROW(KVCacheFactory::create(h2o(8, 2), 1 << 30), InvalidArgument);
  EXPECT_THROW(KVCacheFactory::create(h2o(8, 2), 1, 1 << 30), InvalidArgument);
  EXPECT_THROW(KVCacheBuilder::for_model(1 << 30, h2o(8, 2)), InvalidArgument);
  EXPECT_THROW(KVCacheBuilder::for_model(4096, h2o(8, 2), 4096, 4096), InvalidArgument);
  try {
    KVCacheBuilder::for_model(2147483647, h2o(8, 2));
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("n_layers = 2147483647"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace squeezekv
