// Evaluation: the paper's layer importance measured inside the engine, the sweep's expansion, and a
// short sweep on the real model whose figures must be sane (the CI-sized version of
// scripts/results.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "squeezekv/alloc/budget_allocator.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/core/param_spec.h"
#include "squeezekv/engine/reconstruction.h"
#include "squeezekv/eval/sweep.h"
#include "squeezekv/methods/registry.h"
#include "test_util.h"
#include "stories_model.h"

namespace squeezekv {
namespace {

using test::stories;

TEST(HiddenCosine, EngineValueEqualsAnIndependentComputationFromDumpedStates) {
  Engine engine(stories(), nullptr);
  const ModelConfig& c = stories().config();
  std::vector<std::vector<float>> before(size_t(c.n_layers)), after(size_t(c.n_layers));
  engine.set_residual_observer([&](int layer, const float* b, const float* a, int n, int dim) {
    before[size_t(layer)].insert(before[size_t(layer)].end(), b, b + size_t(n) * size_t(dim));
    after[size_t(layer)].insert(after[size_t(layer)].end(), a, a + size_t(n) * size_t(dim));
  });
  KVCacheConfig config;
  config.method = "squeeze";
  config.set("importance", "hidden-cosine");
  config.budget = 8;
  auto cache = engine.make_cache(config);
  const auto tokens = stories().tokenizer().encode("Once upon a time there was a big red dog. It liked to run.", true);
  std::vector<float> logits;
  engine.begin_prompt(*cache);
  for (size_t i = 0; i < tokens.size(); i += 5) {
    engine.forward(std::span(tokens).subspan(i, std::min<size_t>(5, tokens.size() - i)), *cache, Logits::none, logits);
  }
  engine.end_prompt(*cache);
  // Measured on the cache's first update: the first 5 tokens.
  const std::vector<double> measured = cache->coordinator()->measurements();
  ASSERT_EQ(measured.size(), size_t(c.n_layers));
  const size_t first = 5;
  for (int l = 0; l < c.n_layers; ++l) {
    double sum = 0;
    for (size_t t = 0; t < first; ++t) {
      double ab = 0, aa = 0, bb = 0;
      for (int d = 0; d < c.dim; ++d) {
        const double x = before[size_t(l)][t * size_t(c.dim) + size_t(d)],
                     y = after[size_t(l)][t * size_t(c.dim) + size_t(d)];
        ab += x * y;
        aa += x * x;
        bb += y * y;
      }
      sum += ab / std::sqrt(aa * bb);
    }
    EXPECT_NEAR(measured[size_t(l)], sum / double(first), 1e-5) << "layer " << l;
  }
  // The coordinator received exactly these values and published the paper's schedule.
  ASSERT_TRUE(cache->coordinator()->is_final());
  for (int l = 0; l < c.n_layers; ++l)
    EXPECT_DOUBLE_EQ(cache->coordinator()->measurements()[size_t(l)], measured[size_t(l)]);
  int total = 0;
  for (int b : cache->budgets()) total += b;
  EXPECT_EQ(total, c.n_layers * 8);
}

TEST(Sweep, ExpandsEachAxisOnlyWhereTheMethodReadsIt) {
  SweepSpec spec;
  spec.methods = {"full", "h2o", "squeeze", "streaming", "snapkv"};
  spec.budgets = {16, 64};
  spec.axes = {{"strength", {"0.5", "1"}},
               {"score", {"key-proxy", "attention"}},
               {"importance", {"key-dispersion", "hidden-cosine"}},
               {"squeeze_fraction", {"0.3", "0.6"}}};
  const std::vector<KVCacheConfig> configs = expand_sweep(spec);
  // full 1; h2o 2 budgets x 2 scores; squeeze 2 x 2 x (2 strengths + 2 x 2 fractions);
  // streaming 2; snapkv 2 x 2.
  EXPECT_EQ(configs.size(), size_t(1 + 4 + 24 + 2 + 4));
  std::set<std::string> keys;
  for (const KVCacheConfig& c : configs) {
    EXPECT_NO_THROW(c.validate());
    keys.insert(sweep_variant(c) + "/" + std::to_string(c.budget));
    if (c.method == "snapkv") {
      EXPECT_LE(c.get_int("window"), c.budget / 2);
    }
  }
  EXPECT_EQ(keys.size(), configs.size());
  spec.budgets = {};
  EXPECT_THROW(expand_sweep(spec), InvalidArgument);
  spec.budgets = {4};
  EXPECT_THROW(expand_sweep(spec), InvalidArgument);  // at or below the sinks
}

TEST(Sweep, EverySweepableParameterShowsInTheVariant) {
  // Variants are told apart by their labels: a parameter without one would collapse a sweep of
  // its values (--kernels 5,15) into one configuration.
  for (const ParamSpec* p : all_params()) {
    if (!p->on_command_line || p->kind == ParamKind::text || p->name == "budget") continue;
    EXPECT_FALSE(p->label.empty()) << p->name;
  }
  SweepSpec spec;
  spec.methods = {"snapkv"};
  spec.budgets = {128};
  spec.axes = {{"window", {"16", "32"}}, {"kernel", {"31", "15"}}};
  const std::vector<KVCacheConfig> configs = expand_sweep(spec);
  ASSERT_EQ(configs.size(), 4u);
  std::set<std::string> labels;
  for (const KVCacheConfig& c : configs) labels.insert(sweep_variant(c));
  EXPECT_EQ(labels.size(), 4u);
  EXPECT_EQ(labels.count("snapkv window=16 kernel=15 key-proxy sinks=4"), 1u);
  EXPECT_EQ(labels.count("snapkv key-proxy sinks=4"), 1u);  // the defaults stay out of the label
}

TEST(SweepOnStories, FiguresAreSane) {
  SweepSpec spec;
  spec.budgets = {16, 48};
  spec.axes = {{"score", {"key-proxy", "attention"}}, {"importance", {"key-dispersion", "hidden-cosine"}}};
  spec.base.kv_type = KVType::f32;
  const std::vector<KVCacheConfig> configs = expand_sweep(spec);
  static const std::vector<int32_t> tokens = tokenize_text_file(stories().tokenizer(), test::kTinyStoriesText);
  Engine engine(stories(), nullptr);
  PerplexityOptions options;
  options.n_ctx = 128;
  options.n_batch = 32;
  options.max_chunks = 1;
  const auto results = evaluate_perplexity(engine, tokens, configs, options);
  ASSERT_EQ(results.size(), configs.size());
  const ModelConfig& mc = stories().config();
  const double row_bytes = 2.0 * mc.n_kv_heads * mc.head_dim * 4;  // K and V, f32
  for (const PerplexityResult& r : results) {
    SCOPED_TRACE(sweep_variant(r.config) + " budget " + std::to_string(r.config.budget));
    const std::string policy = resolved_policy(r.config);
    EXPECT_EQ(r.scored, 63);
    EXPECT_GE(r.mean_kl, 0.0);
    EXPECT_GE(r.top1_agreement, 0.0);
    EXPECT_LE(r.top1_agreement, 1.0);
    EXPECT_TRUE(std::isfinite(r.perplexity));
    if (policy == "full") {
      EXPECT_NEAR(r.perplexity, 3.535697, 5e-4);  // llama-perplexity, n_ctx 128, 1 chunk
      EXPECT_EQ(r.mean_kl, 0.0);
      EXPECT_EQ(r.top1_agreement, 1.0);
      continue;
    }
    // Resident memory never exceeds what the method promises: budget + 1 slots per layer and
    // head (a policy that holds the prompt, snapkv and kvzip: the whole 64-token prompt until it
    // ends, then its budget; kvzip beside it one chunk's reconstruction, the chunk and at most
    // kReconstructionPromptMost tokens), whatever the allocator. A ranking across layers shares
    // the same rows unevenly: the layers together.
    const int held = holds_prompt_until_end(r.config) ? 64 : 0;
    const int rebuilt = context_reconstruction(r.config) ? 64 + kReconstructionPromptMost : 0;
    double promised = 0.0;
    for (int b : r.layer_budgets) promised += std::max(b + 1, held + rebuilt) * row_bytes;
    EXPECT_LE(r.peak_kept_bytes, promised);
    EXPECT_LT(r.mean_kept_bytes, r.mean_full_bytes);
    int total = 0;
    for (int b : r.layer_budgets) total += b;
    if (resolved_allocator_info(r.config).ranks_globally) {  // each layer's average, rounded up
      EXPECT_GE(total, mc.n_layers * r.config.budget);
      EXPECT_LE(total, mc.n_layers * (r.config.budget + 1));
    } else {
      EXPECT_EQ(total, mc.n_layers * r.config.budget);
    }
  }
}

}  // namespace
}  // namespace squeezekv
