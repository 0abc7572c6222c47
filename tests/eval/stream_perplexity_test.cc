// Stream perplexity (stream_perplexity.h) on stories260K: with a full cache it scores exactly the
// positions llama-perplexity's chunk protocol scores; segments partition the scored tokens; the
// resident bytes of an evicting cache stay at its promise over the stream.
#include "squeezekv/eval/stream_perplexity.h"

#include <gtest/gtest.h>

#include <cmath>

#include "squeezekv/base/errors.h"
#include "squeezekv/eval/perplexity.h"
#include "stories_model.h"

namespace squeezekv {
namespace {

using test::stories;

const std::vector<int32_t>& text_tokens() {
  static const std::vector<int32_t> tokens = tokenize_text_file(stories().tokenizer(), test::kTinyStoriesText);
  return tokens;
}

TEST(StreamPerplexity, AFullCacheScoresWhatTheChunkProtocolScores) {
  Engine engine(stories(), nullptr);
  KVCacheConfig full;
  full.method = "full";
  const std::vector<KVCacheConfig> configs = {full};
  // A chunk of 300 scores the predictions of tokens 151..299; a stream of 300 with a warm-up of
  // 151 scores the same ones.
  PerplexityOptions chunk;
  chunk.n_ctx = 300;
  chunk.max_chunks = 1;
  StreamOptions stream;
  stream.warmup = 151;
  stream.max_tokens = 300;
  stream.segment = 50;
  const auto a = evaluate_perplexity(engine, text_tokens(), configs, chunk);
  const auto b = evaluate_stream_perplexity(engine, text_tokens(), configs, stream);
  EXPECT_EQ(b[0].scored, a[0].scored);
  EXPECT_NEAR(b[0].mean_nll, a[0].mean_nll, 1e-5);
  // Segments of 50: 50, 50, 49 tokens starting at 151, 201, 251; their NLLs add up to the whole.
  ASSERT_EQ(b[0].segments.size(), 3u);
  double nll = 0.0;
  int64_t scored = 0;
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(b[0].segments[s].first, 151 + 50 * int64_t(s));
    nll += b[0].segments[s].mean_nll * double(b[0].segments[s].scored);
    scored += b[0].segments[s].scored;
  }
  EXPECT_EQ(b[0].segments[2].scored, 49);
  EXPECT_EQ(scored, b[0].scored);
  EXPECT_NEAR(nll / double(scored), b[0].mean_nll, 1e-12);
}

TEST(StreamPerplexity, ResidentBytesStayAtThePromise) {
  Engine engine(stories(), nullptr);
  const ModelConfig& mc = stories().config();
  for (const char* method : {"window", "h2o", "squeeze", "snapkv", "tova"}) {
    SCOPED_TRACE(method);
    KVCacheConfig c;
    c.method = method;
    c.budget = 32;
    c.set("window", 8);
    StreamOptions options;
    options.warmup = 100;
    options.max_tokens = 1500;
    options.segment = 700;
    const std::vector<KVCacheConfig> configs = {c};
    const auto r = evaluate_stream_perplexity(engine, text_tokens(), configs, options);
    double promised = 0.0;  // budget + 1 slots per layer and KV head, fp16 K and V
    for (int b : r[0].layer_budgets) promised += double(b + 1) * mc.n_kv_heads * mc.head_dim * 2 * 2;
    EXPECT_LE(r[0].peak_kept_bytes, promised);
    for (const StreamSegment& s : r[0].segments) EXPECT_LE(s.peak_kept_bytes, promised);
    EXPECT_EQ(r[0].segments.size(), 2u);
    EXPECT_TRUE(std::isfinite(r[0].perplexity));
  }
}

TEST(StreamPerplexity, RejectsAStreamNoLongerThanItsWarmUp) {
  Engine engine(stories(), nullptr);
  const std::vector<KVCacheConfig> configs = {KVCacheConfig{}};
  StreamOptions options;
  options.warmup = 512;
  options.max_tokens = 512;
  EXPECT_THROW(evaluate_stream_perplexity(engine, text_tokens(), configs, options), InvalidArgument);
}

}  // namespace
}  // namespace squeezekv
