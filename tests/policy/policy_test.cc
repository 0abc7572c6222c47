// Every token policy: exact rules on hand-checked inputs, equivalences between methods, and the
// properties every method promises (rows held, sinks, determinism) on random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <numeric>
#include <random>

#include "core/mock_model.h"
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

// ---- exact rules on hand-checked inputs ----

TEST(Streaming, KeepsSinksAndTheMostRecent) {
  auto cache = KVCacheFactory::create(method("streaming", 6, 2));
  decode(*cache, 10, 1);
  EXPECT_EQ(kept(*cache), (std::vector<int64_t>{0, 1, 6, 7, 8, 9}));
}

TEST(Window, KeepsOnlyTheMostRecent) {
  auto cache = KVCacheFactory::create(method("window", 4, 2));
  decode(*cache, 10, 1);
  EXPECT_EQ(kept(*cache), (std::vector<int64_t>{6, 7, 8, 9}));
}

TEST(Streaming, EvictsInPositionOrder) {
  auto cache = KVCacheFactory::create(method("streaming", 4, 1));
  decode(*cache, 4, 1);
  std::vector<int64_t> evicted;
  for (int t = 0; t < 4; ++t) {
    const auto before = kept(*cache);
    decode(*cache, 1, 50 + uint64_t(t));
    const auto after = kept(*cache);
    for (int64_t p : before) {
      if (!std::count(after.begin(), after.end(), p)) evicted.push_back(p);
    }
  }
  EXPECT_EQ(evicted, (std::vector<int64_t>{1, 2, 3, 4}));
}

// Probabilities over 5 slots for a 5-token update: row q attends slots <= q.
std::vector<float> hand_probs() {
  return {1.0f, 0, 0,    0,     0,    0.6f,  0.4f, 0,    0,     0,    0.5f,  0.1f, 0.4f,
          0,    0, 0.4f, 0.05f, 0.3f, 0.25f, 0,    0.3f, 0.05f, 0.1f, 0.15f, 0.4f};
}

TEST(H2O, AttentionSourceEvictsTheLowestCumulativeScore) {
  KVCacheConfig c = method("h2o", 3, 0, 4);
  c.score = ScoreSource::attention;
  c.recent = 0.0;
  auto cache = KVCacheFactory::create(c);
  const std::vector<float> k(20, 1.0f), v(20, 1.0f);
  cache->begin_update(k.data(), v.data(), 5);
  const auto p = hand_probs();
  cache->add_attention(0, p.data(), 5);
  cache->end_update();
  // Cumulative: 2.8, 0.6, 0.8, 0.4, 0.4 -> the two 0.4 rows go.
  EXPECT_EQ(kept(*cache), (std::vector<int64_t>{0, 1, 2}));
  // Budget 2 on a fresh cache: 3 (tie with 4, older first), 4, then 1.
  c.budget = 2;
  auto tight = KVCacheFactory::create(c);
  tight->begin_update(k.data(), v.data(), 5);
  tight->add_attention(0, p.data(), 5);
  tight->end_update();
  EXPECT_EQ(kept(*tight), (std::vector<int64_t>{0, 2}));
}

// A decode step evicts one row, chosen in one pass (no candidate list): it must be the row the
// rule names, the lowest cumulative score among unprotected live rows, ties to the oldest. Random
// attention drawn from {0, 0.5, 1} (many tied scores, decay off), in f16 rows and in KIVI rows
// (whose held rows leave free slots scattered among live ones), checked against a sort.
TEST(H2O, DecodeEvictionIsTheLowestScoreTiesToTheOldest) {
  for (KVType type : {KVType::f16, KVType::kivi2}) {
    SCOPED_TRACE(to_string(type));
    KVCacheConfig c = method("h2o", 40, 3, 8);
    c.score = ScoreSource::attention;
    c.kv_type = type;
    c.kivi_group = 8;
    c.kivi_residual = 8;
    auto cache = KVCacheFactory::create(c, 2);
    std::mt19937 rng(11);
    const int per = 2 * 8;
    for (int step = 0; step < 400; ++step) {
      const auto k = test::normal(size_t(per), uint64_t(step) + 1),
                 v = test::normal(size_t(per), uint64_t(step) + 5000);
      cache->begin_update(k.data(), v.data(), 1);
      std::vector<std::vector<int64_t>> expected(2);
      for (int h = 0; h < 2; ++h) {
        const HeadStore& head = cache->head(h);
        std::vector<float> probs(size_t(head.n_slots()), 0.0f);
        for (int s = 0; s < head.n_slots(); ++s) probs[size_t(s)] = head.live(s) ? 0.5f * float(rng() % 3) : 0.0f;
        cache->add_attention(h, probs.data(), 1);
        if (head.n_live() <= c.budget) continue;
        // The rule by a sort: unprotected live rows by (score, position); the first goes.
        const int64_t seen = cache->tokens_seen();
        const int64_t recent_from = seen - int64_t(c.recent * double(c.budget - c.n_sink));
        std::vector<int> rows;
        for (int s = 0; s < head.n_slots(); ++s) {
          const int64_t p = head.positions()[s];
          if (head.live(s) && p >= c.n_sink && p < recent_from) rows.push_back(s);
        }
        ASSERT_FALSE(rows.empty());
        std::sort(rows.begin(), rows.end(), [&](int a, int b) {
          const float sa = head.scores()[a], sb = head.scores()[b];
          return sa != sb ? sa < sb : head.positions()[a] < head.positions()[b];
        });
        expected[size_t(h)] = {head.positions()[rows[0]]};
      }
      std::vector<std::vector<int64_t>> before = {kept(*cache, 0), kept(*cache, 1)};
      cache->end_update();
      for (int h = 0; h < 2; ++h) {
        std::vector<int64_t> after = kept(*cache, h), gone;
        std::set_difference(before[size_t(h)].begin(), before[size_t(h)].end(), after.begin(), after.end(),
                            std::back_inserter(gone));
        EXPECT_EQ(gone, expected[size_t(h)]) << "step " << step << " head " << h;
      }
    }
    if (type == KVType::kivi2) {
      EXPECT_GT(cache->head(0).held() + cache->head(1).held(), 0);  // free slots scattered among live ones
    }
  }
}

TEST(Tova, AttentionSourceUsesOnlyTheNewestQuery) {
  KVCacheConfig c = method("tova", 3, 0, 4);
  c.score = ScoreSource::attention;
  auto cache = KVCacheFactory::create(c);
  const std::vector<float> k(20, 1.0f), v(20, 1.0f);
  cache->begin_update(k.data(), v.data(), 5);
  const auto p = hand_probs();
  cache->add_attention(0, p.data(), 5);
  cache->end_update();
  // Newest query: 0.3, 0.05, 0.1, 0.15, 0.4 -> evict 1 then 2.
  EXPECT_EQ(kept(*cache), (std::vector<int64_t>{0, 3, 4}));
}

TEST(Tova, OneSelectionSharedByEveryHeadOfTheLayer) {
  KVCacheConfig c = method("tova", 5, 1, 8);
  auto cache = KVCacheFactory::create(c, 4);
  const auto k = test::normal(4 * 20 * 8, 3), v = test::normal(4 * 20 * 8, 4);
  cache->update(k.data(), v.data(), 20);
  decode(*cache, 15, 9);
  for (int h = 1; h < 4; ++h) EXPECT_EQ(kept(*cache, h), kept(*cache, 0));
  EXPECT_EQ(cache->tokens_kept(), 5);
}

TEST(ChunkKV, EvictsWholeChunksByMeanScore) {
  KVCacheConfig c = method("chunkkv", 8, 0, 4);
  c.score = ScoreSource::attention;
  c.recent = 0.0;
  c.set("chunk_size", 2);
  auto cache = KVCacheFactory::create(c);
  const std::vector<float> k(40, 1.0f), v(40, 1.0f);
  cache->begin_update(k.data(), v.data(), 10);
  // One query row giving each slot a chosen score; chunks {0,1} {2,3} {4,5} {6,7} {8,9}.
  std::vector<float> p(100, 0.0f);
  const float score[10] = {0.9f, 0.9f, 0.1f, 0.3f, 0.05f, 0.5f, 0.2f, 0.2f, 0.6f, 0.6f};
  std::copy(score, score + 10, p.begin() + 90);
  cache->add_attention(0, p.data(), 10);
  cache->end_update();
  // Means: 0.9, 0.2, 0.275, 0.2, 0.6: chunk {2,3} (tie with {6,7}, older) goes first -> 8 rows.
  EXPECT_EQ(kept(*cache), (std::vector<int64_t>{0, 1, 4, 5, 6, 7, 8, 9}));
}

TEST(SnapKV, KeepsTheWindowAndTheTopPooledRowsOnceThenStaysAtTheBudget) {
  KVCacheConfig c = method("snapkv", 5, 0, 4);
  c.score = ScoreSource::attention;
  c.set("window", 2);
  c.set("kernel", 1);
  auto cache = KVCacheFactory::create(c);
  const std::vector<float> k(40, 1.0f), v(40, 1.0f);
  cache->begin_update(k.data(), v.data(), 10);
  std::vector<float> p(100, 0.0f);
  const float q8[10] = {0.3f, 0.0f, 0.2f, 0.0f, 0.1f, 0.05f, 0.0f, 0.25f, 0.1f, 0.0f};
  const float q9[10] = {0.2f, 0.0f, 0.2f, 0.0f, 0.0f, 0.1f, 0.0f, 0.2f, 0.1f, 0.2f};
  std::copy(q8, q8 + 10, p.begin() + 80);
  std::copy(q9, q9 + 10, p.begin() + 90);
  cache->add_attention(0, p.data(), 10);
  cache->end_update();
  // Prefix scores 0.5, 0, 0.4, 0, 0.1, 0.15, 0, 0.45 -> top 3: 0, 7, 2; plus window {8, 9}.
  EXPECT_EQ(kept(*cache), (std::vector<int64_t>{0, 2, 7, 8, 9}));
  decode(*cache, 3, 5);
  // A stream stays at the budget: the oldest rows go first (no sinks here), prompt rows before
  // generated ones.
  EXPECT_EQ(kept(*cache), (std::vector<int64_t>{8, 9, 10, 11, 12}));
}

TEST(SnapKV, PoolingSmoothsNeighbouringScores) {
  KVCacheConfig c = method("snapkv", 3, 0, 4);
  c.score = ScoreSource::attention;
  c.set("window", 1);
  c.set("kernel", 3);
  auto cache = KVCacheFactory::create(c);
  const std::vector<float> k(28, 1.0f), v(28, 1.0f);
  cache->begin_update(k.data(), v.data(), 7);
  std::vector<float> p(49, 0.0f);
  // Last query: a lone spike at 1 and a broad bump over 3, 4, 5.
  const float last[7] = {0.0f, 0.4f, 0.0f, 0.2f, 0.2f, 0.2f, 0.0f};
  std::copy(last, last + 7, p.begin() + 42);
  cache->add_attention(0, p.data(), 7);
  cache->end_update();
  // Pooled (width 3, /3): 0.133, 0.133, 0.2, 0.133, 0.2, 0.133 -> 2 and 4 (ties broken by age).
  EXPECT_EQ(kept(*cache), (std::vector<int64_t>{2, 4, 6}));
}

TEST(SnapKV, ExplicitPromptWaitsForItsEnd) {
  KVCacheConfig c = method("snapkv", 6, 1, 8);
  c.set("window", 2);
  auto model = KVCacheBuilder::for_model(1, c);
  model->begin_prompt();
  const auto k = test::normal(8 * 8, 1), v = test::normal(8 * 8, 2);
  for (int chunk = 0; chunk < 3; ++chunk) model->layer(0).update(k.data(), v.data(), 8);
  EXPECT_EQ(model->layer(0).tokens_kept(), 24);
  model->end_prompt();
  EXPECT_EQ(model->layer(0).tokens_kept(), 6);
}

// ---- equivalences, bit-identical ----

void expect_identical(const ModelCache& a, const ModelCache& b) {
  ASSERT_EQ(a.n_layers(), b.n_layers());
  for (int l = 0; l < a.n_layers(); ++l) {
    for (int h = 0; h < a.layer(l).n_heads(); ++h) {
      const HeadStore& x = a.layer(l).head(h);
      const HeadStore& y = b.layer(l).head(h);
      ASSERT_EQ(x.n_slots(), y.n_slots()) << "layer " << l << " head " << h;
      for (int s = 0; s < x.n_slots(); ++s) {
        ASSERT_EQ(x.positions()[s], y.positions()[s]);
        ASSERT_EQ(x.scores()[s], y.scores()[s]);
      }
    }
  }
}

void run_random(ModelCache& cache, int heads, int dim, int prompt, int steps, uint64_t seed) {
  for (int l = 0; l < cache.n_layers(); ++l) {
    const auto k = test::mock_layer_keys(l, cache.n_layers(), heads, prompt, dim, seed + uint64_t(l));
    const auto v = test::normal(k.size(), seed + 99 + uint64_t(l));
    cache.layer(l).update(k.data(), v.data(), prompt);
  }
  for (int t = 0; t < steps; ++t) {
    for (int l = 0; l < cache.n_layers(); ++l) {
      const int n = 1 + int((seed + uint64_t(t)) % 3);
      const auto k = test::normal(size_t(heads * n * dim), seed * 31 + uint64_t(t * 7 + l));
      const auto v = test::normal(k.size(), seed * 37 + uint64_t(t * 7 + l));
      cache.layer(l).update(k.data(), v.data(), n);
    }
  }
}

TEST(Equivalence, PyramidBetaOneChunkSizeOneAndSqueezeStrengthZeroEqualH2O) {
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    KVCacheConfig h2o = method("h2o", 24, 3, 16);
    if (seed % 2) h2o.score = ScoreSource::key_proxy;
    auto reference = KVCacheBuilder::for_model(3, h2o, 2);
    run_random(*reference, 2, 16, 60, 25, seed);
    KVCacheConfig pyramid = h2o, chunk = h2o, squeeze = h2o;
    pyramid.method = "pyramidkv";
    pyramid.set("beta", 1.0);
    chunk.method = "chunkkv";
    chunk.set("chunk_size", 1);
    squeeze.method = "squeeze";
    squeeze.set("strength", 0.0);
    for (const KVCacheConfig& c : {pyramid, chunk, squeeze}) {
      auto other = KVCacheBuilder::for_model(3, c, 2);
      run_random(*other, 2, 16, 60, 25, seed);
      SCOPED_TRACE(c.method);
      expect_identical(*reference, *other);
    }
  }
}

TEST(Equivalence, StreamingAndWindowWithABigBudgetEqualFull) {
  auto full = KVCacheBuilder::for_model(2, method("full", 8, 4, 8), 2);
  run_random(*full, 2, 8, 30, 20, 5);
  for (const char* id : {"streaming", "window"}) {
    auto other = KVCacheBuilder::for_model(2, method(id, 200, 4, 8), 2);
    run_random(*other, 2, 8, 30, 20, 5);
    for (int l = 0; l < 2; ++l) {
      for (int h = 0; h < 2; ++h) {
        EXPECT_EQ(kept(full->layer(l), h), kept(other->layer(l), h)) << id;
        const FetchedRows a = full->layer(l).fetch(h), b = other->layer(l).fetch(h);
        EXPECT_EQ(a.keys, b.keys);
        EXPECT_EQ(a.values, b.values);
      }
    }
  }
}

// ---- properties of every method, both score sources, random shapes ----

// Uniform attention-like probabilities over the causally visible live slots.
void feed_attention(LayerCache& cache, int n_new) {
  for (int h = 0; h < cache.n_heads(); ++h) {
    const HeadStore& head = cache.head(h);
    const int n_slots = head.n_slots();
    std::vector<float> probs(size_t(n_new) * size_t(n_slots), 0.0f);
    const int64_t first = cache.tokens_seen() - n_new;
    for (int q = 0; q < n_new; ++q) {
      int visible = 0;
      for (int s = 0; s < n_slots; ++s) visible += head.live(s) && head.positions()[s] <= first + q;
      for (int s = 0; s < n_slots; ++s) {
        if (head.live(s) && head.positions()[s] <= first + q) {
          // Deterministic, uneven weights.
          probs[size_t(q) * size_t(n_slots) + size_t(s)] =
              float((head.positions()[s] * 7 + q) % 5 + 1) / float(3 * visible);
        }
      }
    }
    cache.add_attention(h, probs.data(), n_new);
  }
}

struct Trace {
  std::vector<std::vector<int64_t>> kept;
};

Trace run_property(const KVCacheConfig& c, int layers, int heads, int prompt, int steps, uint64_t seed) {
  auto model = KVCacheBuilder::for_model(layers, c, heads);
  Trace trace;
  const int dim = c.head_dim;
  for (int step = 0; step <= steps; ++step) {
    for (int l = 0; l < layers; ++l) {
      LayerCache& layer = model->layer(l);
      const int n = step == 0 ? prompt : 1 + int((seed + uint64_t(step)) % 2);
      const auto k = test::mock_layer_keys(l, layers, heads, n, dim, seed * 1000 + uint64_t(step * 10 + l));
      const auto v = test::normal(k.size(), seed * 2000 + uint64_t(step * 10 + l));
      layer.begin_update(k.data(), v.data(), n);
      if (layer.wants_attention()) feed_attention(layer, n);
      layer.end_update();
    }
    if (step == 0) continue;
    const std::string policy = resolved_policy(c);
    for (int l = 0; l < layers; ++l) {
      const LayerCache& layer = model->layer(l);
      const int budget = layer.layer_budget();
      // Under the adakv head split a head may hold more than the budget, its layer never more
      // than heads x budget (snapkv: plus the rows decoded since the prompt, in every head).
      const bool split = resolved_head_split(c) == "adakv";
      int64_t held = 0;
      for (int h = 0; h < heads; ++h) held += int64_t(kept(layer, h).size());
      if (split) {
        const int64_t growth = policy == "snapkv" ? layer.tokens_seen() - prompt : 0;
        EXPECT_LE(held, int64_t(heads) * (budget + growth)) << policy << " layer " << l;
      }
      for (int h = 0; h < heads; ++h) {
        const auto pos = kept(layer, h);
        trace.kept.push_back(pos);
        if (split) {
          // The layer's rows, checked above.
        } else if (policy == "snapkv") {
          // The budget after the prompt, then one more row per decoded token.
          EXPECT_LE(int64_t(pos.size()), budget + layer.tokens_seen() - prompt);
        } else if (policy != "full") {
          EXPECT_LE(int(pos.size()), budget) << policy << " layer " << l;
        } else {
          EXPECT_EQ(int64_t(pos.size()), layer.tokens_seen());
        }
        if (policy != "window") {
          for (int64_t s = 0; s < std::min<int64_t>(c.n_sink, layer.tokens_seen()); ++s) {
            EXPECT_TRUE(std::count(pos.begin(), pos.end(), s)) << policy << ": sink " << s << " lost";
          }
        }
      }
    }
  }
  return trace;
}

TEST(EveryMethod, RowsHeldSinksAndDeterminismOnRandomShapes) {
  for (const MethodInfo& m : all_methods()) {
    for (ScoreSource source : {ScoreSource::key_proxy, ScoreSource::attention}) {
      for (uint64_t seed : {1u, 2u}) {
        KVCacheConfig c = method(std::string(m.id), 10 + int(seed * 7 % 13), 2, 4 + int(seed * 4));
        c.score = source;
        c.set("window", 4);
        c.set("chunk_size", 3);
        const int layers = 2 + int(seed % 3), heads = 1 + int(seed % 3);
        SCOPED_TRACE(std::string(m.id) + " " + to_string(source));
        const Trace a = run_property(c, layers, heads, 40, 12, seed);
        const Trace b = run_property(c, layers, heads, 40, 12, seed);
        EXPECT_EQ(a.kept, b.kept);
      }
    }
  }
}

TEST(EveryPolicy, ComposesWithEveryAllocatorWithExactKeptCounts) {
  for (const char* policy : {"cumulative", "chunked", "tova", "streaming", "window", "snapkv"}) {
    for (const char* allocator : {"uniform", "pyramid", "squeeze"}) {
      KVCacheConfig c = method("h2o", 24, 2, 16);
      c.policy = policy;
      c.allocator = allocator;
      c.set("window", 4);
      c.set("chunk_size", 1);
      auto model = KVCacheBuilder::for_model(4, c, 2);
      run_random(*model, 2, 16, 100, 0, 3);
      SCOPED_TRACE(std::string(policy) + " x " + allocator);
      const std::vector<int> b = model->budgets();
      EXPECT_EQ(std::accumulate(b.begin(), b.end(), 0), 4 * 24);
      for (int l = 0; l < 4; ++l) EXPECT_EQ(model->layer(l).tokens_kept(), b[size_t(l)]);
    }
  }
}

// A policy that says its heads are independent evicts each head, one at a time and in any order,
// exactly as its evict() does over the layer (the cache relies on it to run heads on a pool).
TEST(EveryPolicy, EvictingHeadByHeadEqualsEvictingTheLayer) {
  for (const PolicyInfo* info : all_policies()) {
    KVCacheConfig c = method("h2o", 40, 3, 8);
    c.policy = std::string(info->id);
    c.allocator = info->id == "full" ? "none" : "uniform";
    c.set("chunk_size", 3);
    auto cache = KVCacheFactory::create(c, 4);
    if (!cache->policy().heads_independent()) continue;
    SCOPED_TRACE(std::string(info->id));
    std::mt19937_64 rng(5);
    for (int step = 0; step < 30; ++step) {
      const int n = step == 0 ? 60 : 1 + int(rng() % 3);
      const auto k = test::normal(size_t(4) * size_t(n) * 8, rng()), v = test::normal(k.size(), rng());
      cache->begin_update(k.data(), v.data(), n);
      for (int h = 0; cache->wants_attention() && h < 4; ++h) {
        std::vector<float> probs(size_t(n) * size_t(cache->head(h).n_slots()));
        for (float& p : probs) p = float(rng() % 64) / 64.0f;  // ties between rows, on purpose
        cache->add_attention(h, probs.data(), n);
      }
      cache->end_update();
      // Copies of the rows, evicted to a tighter budget both ways.
      for (const int budget : {30, 17}) {
        LayerRows whole = cache->rows(), by_head = cache->rows();
        auto policy = info->make(component_params(cache->config(), info->params));
        policy->evict(whole, budget);
        for (const int h : {2, 0, 3, 1}) policy->evict_head(by_head, h, budget);
        for (int h = 0; h < 4; ++h) {
          const HeadStore& x = whole.heads[size_t(h)];
          const HeadStore& y = by_head.heads[size_t(h)];
          ASSERT_LE(x.n_live(), budget);
          ASSERT_EQ(x.n_slots(), y.n_slots());
          for (int s = 0; s < x.n_slots(); ++s) ASSERT_EQ(x.positions()[s], y.positions()[s]) << "head " << h;
        }
      }
    }
  }
}

TEST(Parameters, EachBadValueIsRejectedByName) {
  auto bad = [](KVCacheConfig c, const std::string& field) {
    try {
      KVCacheBuilder::for_model(2, c);
      ADD_FAILURE() << field << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()).rfind(field + " = ", 0), 0u) << e.what();
    }
  };
  KVCacheConfig c = method("pyramidkv", 64, 4);
  c.params["beta"] = 0.5;  // bypasses set()'s own range check
  bad(c, "beta");
  c = method("chunkkv", 64, 4);
  c.params["chunk_size"] = int64_t{0};
  bad(c, "chunk_size");
  c = method("snapkv", 64, 4);
  c.set("window", 64);
  bad(c, "window");
  c = method("snapkv", 64, 4);
  c.params["kernel"] = int64_t{4};
  bad(c, "kernel");
  bad(method("streaming", 3, 4), "budget");
  c = method("h2o", 64, 4);
  c.policy = "lru";
  bad(c, "policy");
  c.policy = "";
  c.allocator = "random";
  bad(c, "allocator");
  c = method("full", 64, 4);
  c.allocator = "squeeze";
  bad(c, "allocator");
}

}  // namespace
}  // namespace squeezekv
