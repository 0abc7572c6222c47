// The one prompt protocol (prefill.h) and unbounded generation with an evicting cache: a prompt
// longer than the budget holds at most budget + n_batch rows per head between chunks, and a long
// generation keeps its resident K/V bytes within the promise at every step.
#include "squeezekv/engine/prefill.h"

#include <gtest/gtest.h>

#include "squeezekv/base/errors.h"
#include "squeezekv/engine/generate.h"
#include "squeezekv/eval/perplexity.h"
#include "stories_model.h"

namespace squeezekv {
namespace {

using test::stories;

// Resident bytes of a cache whose every head holds `rows` slots.
size_t bytes_for_rows(const Model& model, int rows) {
  const ModelConfig& c = model.config();
  return size_t(c.n_layers) * size_t(c.n_kv_heads) * size_t(rows) * 2 * size_t(c.head_dim) * 2;
}

TEST(Prefill, ALongPromptStaysWithinBudgetPlusOneChunk) {
  Engine engine(stories(), nullptr);
  const std::vector<int32_t> tokens = tokenize_text_file(stories().tokenizer(), test::kTinyStoriesText);
  for (const char* method : {"window", "h2o", "squeeze", "tova"}) {
    SCOPED_TRACE(method);
    KVCacheConfig c;
    c.method = method;
    c.budget = 64;
    auto cache = engine.make_cache(c);
    PrefillOptions options;
    options.n_batch = 32;
    std::vector<float> logits;
    int chunks = 0;
    prefill(engine, *cache, std::span(tokens).first(2000), options, logits, [&](int64_t done) {
      ++chunks;
      EXPECT_EQ(cache->layer(0).tokens_seen(), done);
      // squeeze may give a layer up to twice the average; slots stop at budget + 1 once final.
      for (int l = 0; l < cache->n_layers(); ++l) {
        EXPECT_LE(cache->layer(l).tokens_kept(), cache->layer(l).layer_budget() + 1);
      }
    });
    EXPECT_EQ(chunks, (2000 + 31) / 32);
    EXPECT_EQ(logits.size(), size_t(stories().config().vocab));
    EXPECT_LE(cache->kept_bytes(), bytes_for_rows(stories(), 2 * 64 + 1));
  }
}

TEST(Generate, AnEvictingCacheTakesAnyLengthInBoundedMemory) {
  Engine engine(stories(), nullptr);
  KVCacheConfig c;
  c.method = "h2o";
  c.budget = 32;
  auto cache = engine.make_cache(c);
  GenerateOptions options;
  options.n_predict = 3000;  // past the model's 512 trained positions and the 2048 default context
  options.ignore_eos = true;
  options.keep_tokens = false;
  options.speed_window = 1000;
  size_t most = 0;
  int64_t steps = 0;
  const GenerateResult r = generate(engine, *cache, "Once upon a time", options, [&](int32_t) {
    most = std::max(most, cache->kept_bytes());
    ++steps;
  });
  EXPECT_EQ(r.n_generated, 3000);
  EXPECT_EQ(steps, 3000);
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_EQ(cache->layer(0).tokens_seen(), 5 + 2999);  // BOS + 4 prompt tokens, the last token unfed
  EXPECT_LE(most, bytes_for_rows(stories(), 32 + 1));
  EXPECT_GT(r.first_window_seconds, 0.0);
  EXPECT_GT(r.last_window_seconds, 0.0);
}

TEST(Generate, AFullCacheIsBoundedByTheContext) {
  Engine engine(stories(), nullptr);
  KVCacheConfig c;
  c.method = "full";
  auto cache = engine.make_cache(c);
  GenerateOptions options;
  options.n_predict = 3000;
  EXPECT_THROW(generate(engine, *cache, "Once upon a time", options), InvalidArgument);
}

}  // namespace
}  // namespace squeezekv

namespace squeezekv {
namespace {

// PromptFeed's updates are the n_batch chunks, each in pieces of max_distance + 1 once a span-rule
// cache clamps a row: exactly what Engine::forward does with prefill's chunks, so prefill (and the
// server, which feeds a PromptFeed one update per step) gives the same logits and rows as plain
// forward calls over the chunks.
TEST(PromptFeed, UpdatesAreTheChunksInTheSpanRulesPieces) {
  Engine engine(stories(), nullptr);
  KVCacheConfig c;
  c.method = "h2o";
  c.budget = 32;
  c.positions = PositionRule::span;
  c.max_distance = 40;
  auto cache = engine.make_cache(c);
  PrefillOptions options;
  options.n_batch = 64;
  PromptFeed feed(engine, *cache, 150, options);
  std::vector<int64_t> sizes;
  std::vector<bool> chunk_ends;
  while (!feed.done()) {
    sizes.push_back(feed.next());
    ASSERT_EQ(feed.take(), sizes.back());
    chunk_ends.push_back(feed.chunk_done());
  }
  // Chunks [0, 64), [64, 128), [128, 150): the first two exceed 41 tokens past the clamp.
  EXPECT_EQ(sizes, (std::vector<int64_t>{41, 23, 41, 23, 22}));
  EXPECT_EQ(chunk_ends, (std::vector<bool>{false, true, false, true, true}));
  EXPECT_EQ(feed.next(), 0);

  // Without the span rule (text positions) a chunk is one update.
  c.positions = PositionRule::text;
  auto text_cache = engine.make_cache(c);
  PromptFeed whole(engine, *text_cache, 150, options);
  sizes.clear();
  while (!whole.done()) sizes.push_back(whole.take());
  EXPECT_EQ(sizes, (std::vector<int64_t>{64, 64, 22}));
}

TEST(PromptFeed, PrefillEqualsForwardOverTheChunks) {
  Engine engine(stories(), nullptr);
  const std::vector<int32_t> text = tokenize_text_file(stories().tokenizer(), test::kTinyStoriesText);
  const auto tokens = std::span(text).first(300);
  for (const PositionRule rule : {PositionRule::span, PositionRule::text}) {
    SCOPED_TRACE(to_string(rule));
    KVCacheConfig c;
    c.method = "squeeze";
    c.budget = 48;
    c.positions = rule;
    c.max_distance = 70;
    auto by_prefill = engine.make_cache(c);
    auto by_forward = engine.make_cache(c);
    PrefillOptions options;
    options.n_batch = 100;
    options.max_rows = 300;
    std::vector<float> a, b;
    prefill(engine, *by_prefill, tokens, options, a);

    if (BudgetCoordinator* coordinator = by_forward->coordinator()) coordinator->set_max_rows(300);
    engine.begin_prompt(*by_forward);
    for (size_t i = 0; i < tokens.size(); i += 100) {
      engine.forward(tokens.subspan(i, 100), *by_forward, i + 100 == tokens.size() ? Logits::last : Logits::none, b);
    }
    engine.end_prompt(*by_forward);
    ASSERT_EQ(a, b);
    for (int l = 0; l < by_prefill->n_layers(); ++l) {
      ASSERT_EQ(by_prefill->layer(l).tokens_kept(), by_forward->layer(l).tokens_kept()) << "layer " << l;
      for (int h = 0; h < by_prefill->layer(l).n_heads(); ++h) {
        const HeadStore& x = by_prefill->layer(l).head(h);
        const HeadStore& y = by_forward->layer(l).head(h);
        ASSERT_EQ(x.n_slots(), y.n_slots());
        for (int s = 0; s < x.n_slots(); ++s) ASSERT_EQ(x.positions()[s], y.positions()[s]);
      }
    }
  }
}

TEST(PromptFeed, RefusesWholePromptLogitsAndBadSizes) {
  Engine engine(stories(), nullptr);
  auto cache = engine.make_cache(KVCacheConfig{});
  PrefillOptions options;
  options.logits = Logits::all;
  EXPECT_THROW(PromptFeed(engine, *cache, 10, options), InvalidArgument);
  options.logits = Logits::last;
  options.n_batch = 0;
  EXPECT_THROW(PromptFeed(engine, *cache, 10, options), InvalidArgument);
  options.n_batch = 8;
  EXPECT_THROW(PromptFeed(engine, *cache, -1, options), InvalidArgument);
}

}  // namespace
}  // namespace squeezekv
