// Positions inside the cache in the engine (docs/positions.md), on the real stories260K model:
// with nothing evicted both rules are the same arithmetic (bit-identical logits); the sliding
// window sees the same relative distances under both (RoPE is relative); once importance eviction
// has dropped rows, the rules differ.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "squeezekv/engine/engine.h"
#include "squeezekv/eval/perplexity.h"
#include "squeezekv/eval/stream_perplexity.h"
#include "stories_model.h"

namespace squeezekv {
namespace {

const char* kText = test::kTinyStoriesText;

using test::stories;

const std::vector<int32_t>& text_tokens() {
  static const std::vector<int32_t> tokens = tokenize_text_file(stories().tokenizer(), kText);
  return tokens;
}

// Logits of every step: the first `prompt` tokens in chunks of `batch`, then one at a time.
std::vector<std::vector<float>> run(const KVCacheConfig& config, int prompt, int total, int batch, ThreadPool* pool) {
  Engine engine(stories(), pool);
  auto cache = engine.make_cache(config);
  const std::vector<int32_t>& tokens = text_tokens();
  std::vector<std::vector<float>> out;
  std::vector<float> logits;
  engine.begin_prompt(*cache);
  for (int i = 0; i < prompt; i += batch) {
    const int n = std::min(batch, prompt - i);
    engine.forward(std::span(tokens).subspan(size_t(i), size_t(n)), *cache, Logits::all, logits);
    out.push_back(logits);
  }
  engine.end_prompt(*cache);
  for (int i = prompt; i < total; ++i) {
    engine.forward(std::span(tokens).subspan(size_t(i), 1), *cache, Logits::last, logits);
    out.push_back(logits);
  }
  return out;
}

KVCacheConfig config(const char* method, int budget, PositionRule rule) {
  KVCacheConfig c;
  c.method = method;
  c.budget = budget;
  c.positions = rule;
  c.score = ScoreSource::attention;
  return c;
}

TEST(Positions, NothingEvictedGivesBitIdenticalLogits) {
  ThreadPool pool(2);
  for (const char* method : {"full", "h2o", "squeeze", "window", "streaming", "tova", "snapkv"}) {
    SCOPED_TRACE(method);
    const auto text = run(config(method, 4000, PositionRule::text), 200, 320, 64, &pool);
    for (PositionRule rule : {PositionRule::cache, PositionRule::span}) {
      const auto other = run(config(method, 4000, rule), 200, 320, 64, &pool);
      ASSERT_EQ(other.size(), text.size());
      for (size_t i = 0; i < other.size(); ++i) ASSERT_EQ(other[i], text[i]) << to_string(rule) << " step " << i;
    }
  }
}

// Within the distance, the span rule is the text rule even while rows are evicted: no row is
// aged out and none is read at a clamped position.
TEST(Positions, SpanWithinTheDistanceIsTheTextRuleBitForBit) {
  for (const char* method : {"h2o", "squeeze", "tova"}) {
    SCOPED_TRACE(method);
    KVCacheConfig span = config(method, 48, PositionRule::span);
    span.max_distance = 400;
    const auto a = run(span, 128, 390, 64, nullptr);
    const auto b = run(config(method, 48, PositionRule::text), 128, 390, 64, nullptr);
    ASSERT_EQ(a, b);
  }
}

// The span rule's clamp, checked against the rank rule where both give every query the same
// distances: StreamingLLM with one sink and budget B keeps the sink and the newest rows; during a
// decode step the sink's rank distance is B and the newest rows' are their text distances, which
// is exactly the span rule with max_distance B. With f32 rows the logits agree up to the rounding
// of the different rotations (ranks against large text positions and one turn forward).
TEST(Positions, SpanClampMatchesRanksWhereTheyPlaceRowsAlike) {
  constexpr int kBudget = 32;
  KVCacheConfig ranks = config("streaming", kBudget, PositionRule::cache);
  ranks.n_sink = 1;
  ranks.kv_type = KVType::f32;  // fp16 storage would round keys rotated by different angles apart
  KVCacheConfig span = ranks;
  span.positions = PositionRule::span;
  span.max_distance = kBudget;
  const auto a = run(ranks, 1, 700, 1, nullptr);
  const auto b = run(span, 1, 700, 1, nullptr);
  ASSERT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t j = 0; j < a[i].size(); ++j) worst = std::max(worst, double(std::fabs(a[i][j] - b[i][j])));
  }
  EXPECT_LT(worst, 1e-3);  // measured 1.2e-4; a distance off by one gives 0.64
  // ... and differs from text positions, where the sink drifts hundreds of positions away.
  KVCacheConfig text = ranks;
  text.positions = PositionRule::text;
  const auto c = run(text, 1, 700, 1, nullptr);
  double apart = 0.0;
  for (size_t j = 0; j < c.back().size(); ++j) apart = std::max(apart, double(std::fabs(c.back()[j] - b.back()[j])));
  EXPECT_GT(apart, 0.1);
}

// An update longer than max_distance + 1 tokens runs as consecutive pieces (every query must be at
// least as far on as the clamped position): the same logits as calling forward piece by piece.
TEST(Positions, SpanSplitsLongUpdatesIntoPieces) {
  KVCacheConfig span = config("h2o", 40, PositionRule::span);
  span.max_distance = 99;
  const auto whole = run(span, 300, 300, 300, nullptr);
  const auto pieces = run(span, 300, 300, 100, nullptr);
  std::vector<float> joined;
  for (const auto& p : pieces) joined.insert(joined.end(), p.begin(), p.end());
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0], joined);
}

TEST(Positions, RulesDifferOnceRowsOfLowerPositionAreEvicted) {
  const auto cache = run(config("h2o", 64, PositionRule::cache), 128, 200, 64, nullptr);
  const auto text = run(config("h2o", 64, PositionRule::text), 128, 200, 64, nullptr);
  EXPECT_EQ(cache.front(), text.front());  // the first chunk evicts only after its attention
  EXPECT_NE(cache.back(), text.back());
}

TEST(Positions, SlidingWindowPerplexityIsTheSameUnderBothRules) {
  Engine engine(stories(), nullptr);
  PerplexityOptions options;
  options.n_ctx = 2048;
  options.max_chunks = 1;
  options.n_batch = 256;
  const std::vector<KVCacheConfig> configs = {config("window", 64, PositionRule::cache),
                                              config("window", 64, PositionRule::text)};
  const auto results = evaluate_perplexity(engine, text_tokens(), configs, options);
  EXPECT_NEAR(results[0].perplexity / results[1].perplexity, 1.0, 1e-3);
  EXPECT_GT(results[0].mean_kl, 0.0);  // it did evict
}

// The first 4,000 tokens of the text as one stream (warm-up 512) at budget 64, far past the 512
// positions stories260K was trained on. Measured: window 3.826; with span positions (max distance
// 511) squeeze 3.761 and h2o 3.803 below it, streaming 3.863, snapkv 3.865, chunkkv 3.873, tova
// 4.034, pyramidkv 6.175 (its deepest layers hold a fraction of the average budget); with cache
// positions 3.95 to 4.45 (pyramidkv 7.13); with text positions every method but the window lies
// between 20 and 30. A regression of either rule to text positions fails every bound here.
TEST(Positions, StreamPerplexityStaysNearTheSlidingWindow) {
  ThreadPool pool(2);
  Engine engine(stories(), &pool);
  StreamOptions options;
  options.max_tokens = 4000;
  options.n_batch = 64;
  const char* methods[] = {"window", "streaming", "snapkv", "chunkkv", "squeeze", "h2o", "tova", "pyramidkv"};
  const size_t n_methods = std::size(methods);
  std::vector<KVCacheConfig> configs;
  for (PositionRule rule : {PositionRule::span, PositionRule::cache}) {
    for (const char* m : methods) {
      configs.push_back(config(m, 64, rule));
      configs.back().max_distance = 511;
    }
  }
  configs.push_back(config("h2o", 64, PositionRule::text));
  const auto results = evaluate_stream_perplexity(engine, text_tokens(), configs, options);
  const double window = results[0].perplexity;
  EXPECT_NEAR(window, 3.83, 0.05);
  EXPECT_NEAR(results[n_methods].perplexity, window, 1e-3 * window);  // the window under ranks
  for (size_t i = 1; i < 2 * n_methods; ++i) {
    if (i == n_methods) continue;
    const std::string method = methods[i % n_methods];
    const bool span = i < n_methods;
    SCOPED_TRACE(method + (span ? " span" : " cache"));
    double factor = span ? 1.07 : 1.25;
    if (method == "pyramidkv") factor = span ? 1.7 : 2.0;
    if (span && method == "squeeze") factor = 1.0;  // below the window, as inside the trained span
    if (span && method == "h2o") factor = 1.01;
    EXPECT_LT(results[i].perplexity, factor * window);
    EXPECT_EQ(results[i].scored, 4000 - 512);
  }
  EXPECT_GT(results.back().perplexity, 4.0 * window);  // text positions past the trained span
}

// Quantized keys under positions inside the cache go through the fused turn-back kernel
// (query_probs_rotated) instead of the f32 scratch. An f32-stored config reads the same tokens with
// exact keys; the q8_0 one must stay close to it (10-bit rows at head_dim 8: mean KL of a few
// thousandths, docs/notes/), and its rows must really have been shifted.
TEST(Positions, QuantizedKeysTurnBackInTheFusedKernel) {
  for (const char* type : {"q8_0", "q4_0"}) {
    SCOPED_TRACE(type);
    KVCacheConfig exact = config("h2o", 24, PositionRule::cache);
    exact.kv_type = KVType::f32;
    KVCacheConfig quant = exact;
    quant.set("k_type", type);
    quant.set("v_type", "f32");
    const auto a = run(exact, 64, 160, 32, nullptr);
    const auto b = run(quant, 64, 160, 32, nullptr);
    ASSERT_EQ(a.size(), b.size());
    double kl = 0;
    int agree = 0, steps = 0;
    for (size_t s = 2; s < a.size(); ++s) {  // the decode steps
      const auto& p = a[s];
      const auto& q = b[s];
      double mp = -1e30, mq = -1e30;
      for (size_t i = 0; i < p.size(); ++i) mp = std::max(mp, double(p[i])), mq = std::max(mq, double(q[i]));
      double zp = 0, zq = 0;
      for (size_t i = 0; i < p.size(); ++i) zp += std::exp(p[i] - mp), zq += std::exp(q[i] - mq);
      for (size_t i = 0; i < p.size(); ++i) {
        const double lp = p[i] - mp - std::log(zp), lq = q[i] - mq - std::log(zq);
        kl += std::exp(lp) * (lp - lq);
      }
      agree += std::max_element(p.begin(), p.end()) - p.begin() == std::max_element(q.begin(), q.end()) - q.begin();
      ++steps;
    }
    kl /= steps;
    EXPECT_GT(kl, 0.0);  // the keys really are quantized
    // q8_0 keys stay close; q4_0 keys at head_dim 8 are far worse (docs/notes/) but finite.
    if (std::string(type) == "q8_0") {
      EXPECT_LT(kl, 0.05);
      EXPECT_GT(agree, steps * 8 / 10);
    } else {
      EXPECT_TRUE(std::isfinite(kl));
    }
    // Rows were evicted and shifted: the fused path ran.
    Engine engine(stories(), nullptr);
    auto cache = engine.make_cache(quant);
    std::vector<float> logits;
    const auto& tokens = text_tokens();
    engine.begin_prompt(*cache);
    engine.forward(std::span(tokens).subspan(0, 100), *cache, Logits::none, logits);
    engine.end_prompt(*cache);
    for (int i = 100; i < 120; ++i)
      engine.forward(std::span(tokens).subspan(size_t(i), 1), *cache, Logits::last, logits);
    int32_t shifted = 0;
    for (int l = 0; l < cache->n_layers(); ++l) shifted = std::max(shifted, cache->layer(l).head(0).max_shift());
    EXPECT_GT(shifted, 0);
  }
}

// KIVI keys under positions inside the cache: each group is decoded into a tile, turned back and
// dotted (HeadStore::key_probs_rotated). Against f32 storage the logits stay close, and the run
// really quantized groups, held evicted rows in them and shifted rows.
TEST(Positions, KiviKeysTurnBackGroupByGroup) {
  KVCacheConfig exact = config("h2o", 24, PositionRule::cache);
  exact.kv_type = KVType::f32;
  KVCacheConfig kivi = exact;
  kivi.set("kv_type", "kivi4");
  kivi.kivi_group = 8;
  kivi.kivi_residual = 8;
  const auto a = run(exact, 64, 160, 32, nullptr);
  const auto b = run(kivi, 64, 160, 32, nullptr);
  ASSERT_EQ(a.size(), b.size());
  int agree = 0, steps = 0;
  double worst = 0;
  for (size_t s = 2; s < a.size(); ++s) {
    for (size_t i = 0; i < a[s].size(); ++i) {
      ASSERT_TRUE(std::isfinite(b[s][i]));
      worst = std::max(worst, double(std::fabs(a[s][i] - b[s][i])));
    }
    agree += std::max_element(a[s].begin(), a[s].end()) - a[s].begin() ==
             std::max_element(b[s].begin(), b[s].end()) - b[s].begin();
    ++steps;
  }
  EXPECT_GT(worst, 0.0);             // the keys really are codes
  EXPECT_GT(agree, steps * 6 / 10);  // and close: 4-bit codes over groups of 8 tokens
  Engine engine(stories(), nullptr);
  auto cache = engine.make_cache(kivi);
  std::vector<float> logits;
  const auto& tokens = text_tokens();
  engine.begin_prompt(*cache);
  engine.forward(std::span(tokens).subspan(0, 100), *cache, Logits::none, logits);
  engine.end_prompt(*cache);
  for (int i = 100; i < 140; ++i) engine.forward(std::span(tokens).subspan(size_t(i), 1), *cache, Logits::last, logits);
  int32_t shifted = 0;
  int held = 0, quantized = 0;
  for (int l = 0; l < cache->n_layers(); ++l) {
    const HeadStore& head = cache->layer(l).head(0);
    shifted = std::max(shifted, head.max_shift());
    held += head.held();
    for (int s = 0; s < head.n_slots(); ++s) quantized += head.live(s) && head.key_quantized(s);
  }
  EXPECT_GT(shifted, 0);
  EXPECT_GT(quantized, 0);
  EXPECT_GT(held, 0);
}

}  // namespace
}  // namespace squeezekv
