// The engine driving a model cache with sliding layers (core/layer_kind.h), on the real model: the
// engine's measurements reach the schedule of the global layers alone, and a window that never
// fills changes nothing. (The engine's own window mask comes with the models that have one.)
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "squeezekv/alloc/hidden_cosine_budgets.h"
#include "squeezekv/alloc/squeeze_budgets.h"
#include "squeezekv/engine/engine.h"
#include "stories_model.h"

namespace squeezekv {
namespace {

using test::stories;

const std::vector<int32_t>& prompt() {
  static const std::vector<int32_t> tokens = stories().tokenizer().encode(
      "Once upon a time there was a big red dog. It liked to run in the park with its friend, a little cat.", true);
  return tokens;
}

// stories260K has 5 layers: 0, 1 and 3 slide over `window`, 2 and 4 are global.
std::unique_ptr<ModelCache> cache_with_windows(KVCacheConfig config, int window) {
  const ModelConfig& c = stories().config();
  config.head_dim = c.head_dim;
  const LayerKind s = LayerKind::sliding(window), g = LayerKind::global();
  return std::make_unique<ModelCache>(config, c.n_layers, c.n_kv_heads, 1, std::vector<LayerKind>{s, s, g, s, g});
}

// The prompt in chunks of 5, then `decode` steps on the prompt's tokens again; the last logits.
std::vector<float> run(Engine& engine, ModelCache& cache, int decode) {
  std::vector<float> logits;
  const std::vector<int32_t>& tokens = prompt();
  engine.begin_prompt(cache);
  for (size_t i = 0; i < tokens.size(); i += 5) {
    engine.forward(std::span(tokens).subspan(i, std::min<size_t>(5, tokens.size() - i)), cache, Logits::last, logits);
  }
  engine.end_prompt(cache);
  for (int t = 0; t < decode; ++t) {
    const int32_t token = tokens[size_t(t) % tokens.size()];
    engine.forward(std::span(&token, 1), cache, Logits::last, logits);
  }
  return logits;
}

std::vector<int> global_budgets(const ModelCache& cache) {
  return {cache.layer(2).layer_budget(), cache.layer(4).layer_budget()};
}

TEST(SlidingCache, EngineMeasuresForTheGlobalLayersAlone) {
  Engine engine(stories(), nullptr);
  for (const char* importance : {"hidden-cosine", "key-dispersion"}) {
    SCOPED_TRACE(importance);
    KVCacheConfig config;
    config.method = "squeeze";
    config.set("importance", importance);
    config.budget = 12;
    config.n_sink = 2;
    auto cache = cache_with_windows(config, 16);
    run(engine, *cache, 20);
    const BudgetCoordinator* coordinator = cache->coordinator();
    ASSERT_NE(coordinator, nullptr);
    ASSERT_TRUE(coordinator->is_final());
    const std::vector<double> m = coordinator->measurements();
    for (const int l : {0, 1, 3}) {
      EXPECT_EQ(m[size_t(l)], 0.0) << l;
      EXPECT_EQ(cache->layer(l).layer_budget(), 16);
      EXPECT_EQ(cache->layer(l).tokens_kept(), 16);  // the newest 16 of the prompt and 20 steps
      EXPECT_EQ(cache->layer(l).fetch(0).positions.front(), int64_t(prompt().size()) + 20 - 16);
    }
    const std::vector<double> global = {m[2], m[4]};
    const std::vector<int> expected = std::string(importance) == "hidden-cosine"
                                          ? hidden_cosine_budgets(global, 12, 2, config.get_real("squeeze_fraction"))
                                          : squeeze_budgets(global, 12, 2, 1.0);
    EXPECT_EQ(global_budgets(*cache), expected);
    EXPECT_EQ(expected[0] + expected[1], 2 * 12);
    EXPECT_EQ(cache->kept_bytes(), cache->sliding_kept_bytes() + cache->evicting_kept_bytes());
  }
}

// Windows longer than everything the sequence holds keep every row: the same logits, to the bit,
// as the cache without windows.
TEST(SlidingCache, AWindowThatNeverFillsChangesNothing) {
  Engine engine(stories(), nullptr);
  KVCacheConfig config;
  config.method = "full";
  const std::vector<float> with_windows = run(engine, *cache_with_windows(config, 1000), 12);
  const std::vector<float> without = run(engine, *engine.make_cache(config), 12);
  EXPECT_EQ(with_windows, without);
}

}  // namespace
}  // namespace squeezekv
