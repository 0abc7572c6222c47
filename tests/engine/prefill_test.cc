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
  const std::vector<int32_t> tokens =
      tokenize_text_file(stories().tokenizer(), test::kTinyStoriesText);
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
