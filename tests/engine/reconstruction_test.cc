// KVzip's context reconstruction (engine/reconstruction.h) and the kvzip policy on a real model:
// the weights fed back equal a softmax over the span taken from scratch, the pass leaves no trace
// in the cache, the kept rows are the top scores (per head, or ranked across layers by the global
// allocator), a streamed prompt holds its budget plus a chunk, and bad input is refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>

#include "squeezekv/base/errors.h"
#include "squeezekv/engine/prefill.h"
#include "squeezekv/engine/reconstruction.h"
#include "squeezekv/eval/text_file.h"
#include "squeezekv/methods/registry.h"
#include "stories_model.h"
#include "test_util.h"

namespace squeezekv {
namespace {

// Softmax weights of `group` heads over `n` rows from random logits, the rows at shuffled
// positions (some free), against the same softmax taken over the span's rows alone.
TEST(ReconstructionWeights, EqualASoftmaxOverTheSpanMaxedOverTheGroup) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const size_t group = 1 + size_t(trial % 4), n = 40, ld = 48;
    std::vector<int64_t> pos(n);
    std::iota(pos.begin(), pos.end(), 0);
    std::shuffle(pos.begin(), pos.end(), rng);
    pos[3] = pos[17] = HeadStore::kFree;
    const ReconstructionSpan span{2, 10, 25, 33};  // sinks 0-1, chunk 10-24, reconstruction 33..
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> logits(group * ld), probs(group * ld, 0.0f);
    for (size_t i = 0; i < group; ++i) {
      double sum = 0.0;
      for (size_t s = 0; s < n; ++s) {
        logits[i * ld + s] = normal(rng);
        if (pos[s] != HeadStore::kFree) sum += std::exp(double(logits[i * ld + s]));
      }
      for (size_t s = 0; s < n; ++s) {
        probs[i * ld + s] = pos[s] == HeadStore::kFree ? 0.0f : float(std::exp(double(logits[i * ld + s])) / sum);
      }
    }
    std::vector<float> got(n, -1.0f), in_softmax(n), in_chunk(n);
    reconstruction_masks(pos.data(), int(n), span, in_softmax.data(), in_chunk.data());
    // Odd trials weigh as KVzip+ does: per query head and row a factor, and one per query.
    std::vector<float> out_norms(group * ld);
    std::uniform_real_distribution<float> factor(0.1f, 4.0f);
    for (float& w : out_norms) w = factor(rng);
    const bool plus = trial % 2 == 1;
    const float query_scale = plus ? factor(rng) : 1.0f;
    const OutputWeighting by = plus ? OutputWeighting{out_norms.data(), ld, query_scale} : OutputWeighting{};
    reconstruction_weights(in_softmax.data(), in_chunk.data(), probs.data(), group, ld, int(n), got.data(), by);
    for (size_t s = 0; s < n; ++s) {
      double want = 0.0;
      if (pos[s] != HeadStore::kFree && pos[s] >= 10 && pos[s] < 25) {
        for (size_t i = 0; i < group; ++i) {
          double sum = 0.0;
          for (size_t r = 0; r < n; ++r) {
            const int64_t p = pos[r];
            if (p != HeadStore::kFree && (p < 2 || (p >= 10 && p < 25) || p >= 33)) {
              sum += std::exp(double(logits[i * ld + r]));
            }
          }
          const double w = plus ? double(out_norms[i * ld + s]) * double(query_scale) : 1.0;
          want = std::max(want, std::exp(double(logits[i * ld + s])) / sum * w);
        }
      }
      EXPECT_NEAR(got[s], want, 1e-6 * std::max(1.0, want)) << "trial " << trial << " row " << s;
    }
  }
}

// KVzip+'s output norms from the Gram matrices equal ||W_h v|| taken directly, W_h being query
// head h's columns of the attention output projection (GGUF rows: one output dimension each).
TEST(OutputGrams, GiveTheNormOfTheValueThroughEachHeadsColumns) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int n_heads = 3, hd = 8, dim = 24;
  std::vector<float> wo(size_t(dim) * n_heads * hd);
  for (float& x : wo) x = normal(rng);
  const WeightMatrix w{wo.data(), TensorType::f32, dim, int64_t(n_heads) * hd};
  const std::vector<float> grams = output_grams(w, n_heads, hd);
  ASSERT_EQ(grams.size(), size_t(n_heads * hd * hd));
  for (int trial = 0; trial < 10; ++trial) {
    std::vector<float> v(hd);
    for (float& x : v) x = normal(rng);
    for (int h = 0; h < n_heads; ++h) {
      double sq = 0.0;
      for (int r = 0; r < dim; ++r) {
        double y = 0.0;
        for (int a = 0; a < hd; ++a) y += double(wo[size_t(r) * n_heads * hd + size_t(h * hd + a)]) * v[size_t(a)];
        sq += y * y;
      }
      EXPECT_NEAR(output_norm(grams.data() + size_t(h) * hd * hd, v.data(), hd), std::sqrt(sq), 1e-4 * std::sqrt(sq));
    }
  }
  EXPECT_THROW(output_grams(w, 2, hd), InvalidArgument);  // 16 columns are not 24
}

TEST(ReconstructionTokens, ThePromptThenTheChunk) {
  const Tokenizer& tok = test::stories().tokenizer();
  const std::vector<int32_t> context =
      tok.encode("Once upon a time there was a cat who liked to play in the sun.", true);
  ASSERT_GT(context.size(), 12u);
  auto join = [](std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<int32_t> suffix = tok.encode("\n", false);
  const std::vector<int32_t> head(context.begin(), context.begin() + 10), tail(context.begin() + 10, context.end());
  EXPECT_EQ(reconstruction_tokens(tok, context, 0, 10),
            join(join(tok.encode("\n\nRepeat the previous context exactly.", false), suffix), head));
  const std::vector<int32_t> quoted(context.begin() + 2, context.begin() + 10);  // the last 8 of the chunk before
  EXPECT_EQ(
      reconstruction_tokens(tok, context, 10, int64_t(context.size())),
      join(join(join(tok.encode("\n\nRepeat the part of the previous context exactly, starting with", false), quoted),
                suffix),
           tail));
}

std::vector<int32_t> story_tokens(size_t n) {
  const std::string text = read_text_file(test::kTinyStoriesText, "text");
  std::vector<int32_t> tokens = test::stories().tokenizer().encode(text.substr(0, 20000), true);
  tokens.resize(n);
  return tokens;
}

KVCacheConfig kvzip(int budget) {
  KVCacheConfig c;
  c.method = "kvzip_uniform";
  c.budget = budget;
  return c;
}

std::vector<int32_t> greedy(Engine& engine, ModelCache& cache, std::vector<float> logits, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const auto token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(token);
    engine.forward(std::span(&token, 1), cache, Logits::last, logits);
  }
  return out;
}

// Per (layer, head): position -> score of every row it holds.
using Scores = std::vector<std::vector<std::map<int64_t, float>>>;
Scores scores_of(const ModelCache& cache) {
  Scores out(size_t(cache.n_layers()));
  for (int l = 0; l < cache.n_layers(); ++l) {
    for (int h = 0; h < cache.layer(l).n_heads(); ++h) {
      const HeadStore& store = cache.layer(l).head(h);
      std::map<int64_t, float> rows;
      for (int s = 0; s < store.n_slots(); ++s) {
        if (store.live(s)) rows[store.positions()[s]] = store.scores()[s];
      }
      out[size_t(l)].push_back(std::move(rows));
    }
  }
  return out;
}

// With a budget above the context nothing is evicted: the reconstruction's rows are gone again, the
// rows are the full cache's own, every row is scored in [0, 1], and greedy decoding continues as
// the full cache does.
TEST(Kvzip, TheReconstructionLeavesNoTrace) {
  Engine engine(test::stories(), nullptr);
  const std::vector<int32_t> context = story_tokens(300);
  PrefillOptions options;
  options.n_batch = 64;
  KVCacheConfig full;
  full.method = "full";
  auto a = engine.make_cache(full);
  auto b = engine.make_cache(kvzip(1000));
  std::vector<float> la, lb;
  prefill(engine, *a, context, options, la);
  prefill(engine, *b, context, options, lb);
  EXPECT_EQ(la, lb);
  const auto dim = static_cast<size_t>(engine.model().config().head_dim);
  std::vector<float> ka(dim), kb(dim);
  for (int l = 0; l < a->n_layers(); ++l) {
    EXPECT_EQ(b->layer(l).tokens_seen(), 300);
    for (int h = 0; h < a->layer(l).n_heads(); ++h) {
      const HeadStore& x = a->layer(l).head(h);
      const HeadStore& y = b->layer(l).head(h);
      ASSERT_EQ(y.n_live(), 300);
      for (int s = 0; s < y.n_slots(); ++s) {
        if (!y.live(s)) continue;
        const int64_t p = y.positions()[s];
        ASSERT_LT(p, 300);
        ASSERT_EQ(x.positions()[p], p);  // the full cache holds position p at slot p
        x.load_key(int(p), ka.data());
        y.load_key(s, kb.data());
        EXPECT_EQ(ka, kb);
        EXPECT_GE(y.scores()[s], 0.0f);
        EXPECT_LE(y.scores()[s], 1.0f);
      }
    }
  }
  EXPECT_EQ(greedy(engine, *a, la, 16), greedy(engine, *b, lb, 16));
}

// Per head, the rows kept at budget B are the sinks and the best B - n_sink scores of the rest
// (ties to the newer), the scores being those of a run that keeps everything; decoding stays there.
TEST(Kvzip, KeepsTheBestScoredRowsOfEachHead) {
  Engine engine(test::stories(), nullptr);
  const std::vector<int32_t> context = story_tokens(400);
  PrefillOptions options;
  options.n_batch = 128;
  auto all = engine.make_cache(kvzip(1000));
  auto kept = engine.make_cache(kvzip(40));
  std::vector<float> logits;
  prefill(engine, *all, context, options, logits);
  prefill(engine, *kept, context, options, logits);
  const Scores every = scores_of(*all), held = scores_of(*kept);
  for (size_t l = 0; l < every.size(); ++l) {
    for (size_t h = 0; h < every[l].size(); ++h) {
      std::vector<std::pair<float, int64_t>> rest;
      std::vector<int64_t> want = {0, 1, 2, 3};
      for (const auto& [p, s] : every[l][h]) {
        if (p >= 4) rest.emplace_back(s, p);
      }
      std::sort(rest.begin(), rest.end(), [](const auto& x, const auto& y) {
        return x.first != y.first ? x.first > y.first : x.second > y.second;
      });
      for (size_t i = 0; i < 36; ++i) want.push_back(rest[i].second);
      std::sort(want.begin(), want.end());
      std::vector<int64_t> got;
      for (const auto& [p, s] : held[l][h]) got.push_back(p);
      EXPECT_EQ(got, want) << "layer " << l << " head " << h;
    }
  }
  for (int i = 0; i < 12; ++i) {
    const int32_t token = 42 + i;
    engine.forward(std::span(&token, 1), *kept, Logits::last, logits);
    for (int l = 0; l < kept->n_layers(); ++l) EXPECT_LE(kept->layer(l).tokens_kept(), 40);
  }
  // The sinks and the newest token stay: new rows are kept before any context row.
  const HeadStore& head = kept->layer(0).head(0);
  int newest = 0;
  for (int s = 0; s < head.n_slots(); ++s) newest += head.live(s) && head.positions()[s] >= 400 ? 1 : 0;
  EXPECT_EQ(newest, 12);
}

// The global allocator: one ranking over every layer and head conserves layers x heads x budget
// rows, gives each head at least its floor, follows the scores across layers (a kept row never
// scores below an evicted one of a head above its floor) and gives the layers different counts.
TEST(Kvzip, TheGlobalRankingConservesTheTotalAndFollowsTheScores) {
  Engine engine(test::stories(), nullptr);
  const std::vector<int32_t> context = story_tokens(400);
  PrefillOptions options;
  options.n_batch = 128;
  auto all = engine.make_cache(kvzip(1000));
  KVCacheConfig global = kvzip(40);
  global.method = "kvzip";
  global.set("global_floor", ParamValue(0.25));
  auto kept = engine.make_cache(global);
  std::vector<float> logits;
  prefill(engine, *all, context, options, logits);
  prefill(engine, *kept, context, options, logits);
  const Scores every = scores_of(*all), held = scores_of(*kept);
  int64_t total = 0;
  float lowest_kept = std::numeric_limits<float>::infinity(), highest_evicted = 0.0f;
  std::vector<int> per_layer;
  for (size_t l = 0; l < every.size(); ++l) {
    int rows = 0;
    for (size_t h = 0; h < every[l].size(); ++h) {
      const auto& have = held[l][h];
      rows += int(have.size());
      EXPECT_GE(have.size(), 10u) << "layer " << l << " head " << h;  // ceil(0.25 x 40)
      std::vector<float> kept_scores;
      for (const auto& [p, s] : every[l][h]) {
        if (p < 4) {
          EXPECT_TRUE(have.contains(p)) << "a sink left layer " << l;
        } else if (have.contains(p)) {
          kept_scores.push_back(s);
        } else {
          highest_evicted = std::max(highest_evicted, s);
        }
      }
      // The floor is the sinks and the head's 6 best rows; the rest ranked against every head.
      std::sort(kept_scores.rbegin(), kept_scores.rend());
      for (size_t i = 6; i < kept_scores.size(); ++i) lowest_kept = std::min(lowest_kept, kept_scores[i]);
    }
    per_layer.push_back(rows);
    total += rows;
  }
  EXPECT_EQ(total, int64_t(every.size()) * int64_t(every[0].size()) * 40);
  EXPECT_GE(lowest_kept, highest_evicted);
  EXPECT_NE(*std::min_element(per_layer.begin(), per_layer.end()),
            *std::max_element(per_layer.begin(), per_layer.end()));
}

// Streaming: after every prefilled piece a head holds at most its budget plus one chunk; at the
// prompt's end, its budget. Identical input gives identical rows.
TEST(Kvzip, StreamingHoldsTheBudgetPlusOneChunk) {
  Engine engine(test::stories(), nullptr);
  const std::vector<int32_t> context = story_tokens(500);
  KVCacheConfig c = kvzip(48);
  c.set("kvzip_mode", ParamValue(std::string("streaming")));
  c.set("kvzip_chunk", ParamValue(int64_t(100)));
  PrefillOptions options;
  options.n_batch = 25;
  auto cache = engine.make_cache(c);
  std::vector<float> logits;
  int most = 0, checks = 0;
  prefill(engine, *cache, context, options, logits, [&](int64_t) {
    for (int l = 0; l < cache->n_layers(); ++l) most = std::max(most, cache->layer(l).tokens_kept());
    ++checks;
  });
  EXPECT_EQ(checks, 20);
  EXPECT_LE(most, 48 + 100);
  EXPECT_GT(most, 48);  // a chunk is held beside the budget before it is scored
  for (int l = 0; l < cache->n_layers(); ++l) EXPECT_LE(cache->layer(l).tokens_kept(), 48);
  auto again = engine.make_cache(c);
  std::vector<float> logits2;
  prefill(engine, *again, context, options, logits2);
  EXPECT_EQ(logits, logits2);
  EXPECT_EQ(scores_of(*cache), scores_of(*again));
}

// KVzip+ (kvzip_normalize on, the method kvzip_plus): its scores are not KVzip's, and they do not
// depend on how the pass is cut into updates (the chunk's output norms are taken once and read by
// every later update of its pass); a cache kept at a budget holds the best of them per head.
TEST(Kvzip, PlusWeighsByOutputNormsTheSameInEveryUpdate) {
  Engine engine(test::stories(), nullptr);
  const std::vector<int32_t> context = story_tokens(300);
  KVCacheConfig plus = kvzip(1000);
  plus.set("kvzip_normalize", ParamValue(std::string("on")));
  std::vector<float> logits;
  PrefillOptions whole, pieces;
  whole.n_batch = 1000;
  pieces.n_batch = 37;
  auto a = engine.make_cache(plus), b = engine.make_cache(plus), c = engine.make_cache(kvzip(1000));
  prefill(engine, *a, context, whole, logits);
  prefill(engine, *b, context, pieces, logits);
  prefill(engine, *c, context, whole, logits);
  const Scores x = scores_of(*a), y = scores_of(*b), z = scores_of(*c);
  int differ = 0;
  for (size_t l = 0; l < x.size(); ++l) {
    for (size_t h = 0; h < x[l].size(); ++h) {
      ASSERT_EQ(x[l][h].size(), 300u);
      for (const auto& [p, s] : x[l][h]) {
        if (p < 4) continue;  // sinks: never scored
        ASSERT_TRUE(std::isfinite(s));
        EXPECT_GE(s, 0.0f);
        EXPECT_NEAR(y[l][h].at(p), s, 1e-4f * std::max(1.0f, s)) << "layer " << l << " head " << h << " pos " << p;
        differ += std::fabs(z[l][h].at(p) - s) > 1e-3f * std::max(1.0f, s) ? 1 : 0;
      }
    }
  }
  EXPECT_GT(differ, 0);
  KVCacheConfig method;
  method.method = "kvzip_plus";
  method.budget = 1000;
  auto d = engine.make_cache(method);
  prefill(engine, *d, context, whole, logits);
  const Scores w = scores_of(*d);  // the global allocator over the same scores
  for (size_t l = 0; l < x.size(); ++l) {
    for (size_t h = 0; h < x[l].size(); ++h) EXPECT_EQ(w[l][h], x[l][h]) << "layer " << l << " head " << h;
  }
}

TEST(Kvzip, AContextNoLongerThanTheSinksIsRefused) {
  Engine engine(test::stories(), nullptr);
  auto cache = engine.make_cache(kvzip(16));
  const std::vector<int32_t> context = story_tokens(3);
  std::vector<float> logits;
  try {
    prefill(engine, *cache, context, {}, logits);
    FAIL() << "a context of 3 tokens with 4 sinks was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("n_sink = 4"), std::string::npos) << e.what();
  }
}

TEST(Kvzip, TheGlobalAllocatorRefusesScoresThatDoNotRankAcrossLayers) {
  KVCacheConfig c;
  c.method = "h2o";
  c.allocator = "global";
  try {
    c.validate();
    FAIL() << "global over h2o was accepted";
  } catch (const InvalidArgument& e) {
    const std::string why = e.what();
    EXPECT_NE(why.find("allocator = global"), std::string::npos) << why;
    EXPECT_NE(why.find("kvzip"), std::string::npos) << why;
  }
  c.method = "kvzip";
  EXPECT_NO_THROW(c.validate());
}

}  // namespace
}  // namespace squeezekv
