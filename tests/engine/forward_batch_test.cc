// Engine::forward_batch: sequences stepped together (prefill chunks and decode steps mixed, each
// over its own cache and method) give bit for bit the logits each gives alone, so a server's
// continuous batching cannot change any sequence's tokens.
#include <gtest/gtest.h>

#include <filesystem>

#include "squeezekv/base/errors.h"
#include "squeezekv/engine/engine.h"
#include "squeezekv/engine/random_model.h"
#include "squeezekv/ops/model_ops.h"
#include "squeezekv/ops/thread_pool.h"
#include "stories_model.h"
#include "test_util.h"

namespace squeezekv {
namespace {

using test::stories;

struct Seq {
  std::string method;
  std::string prompt;
  int start;  // the batch step at which it joins
};

const Seq kSeqs[] = {
    {"full", "Once upon a time", 0},
    {"squeeze", "The little dog ran to the park and saw a big red ball. He", 0},
    {"h2o", "Lily had a cat.", 3},
    {"window", "Tom and Sam were friends. One day they", 5},
};
constexpr int kChunk = 5;    // prompt tokens per step, so prompts take several steps
constexpr int kDecode = 24;  // greedy tokens per sequence

KVCacheConfig config_for(const std::string& method) {
  KVCacheConfig c;
  c.method = method;
  c.budget = 12;  // small enough that the evicting caches evict during the test
  c.score = ScoreSource::attention;
  return c;
}

// One sequence alone: chunked prompt, then greedy decode; the logits of every step that has them.
std::vector<std::vector<float>> alone(Engine& engine, const Seq& seq) {
  const Model& model = engine.model();
  auto cache = engine.make_cache(config_for(seq.method));
  const auto tokens = model.tokenizer().encode(seq.prompt, true);
  std::vector<std::vector<float>> out;
  std::vector<float> logits;
  engine.begin_prompt(*cache);
  for (size_t i = 0; i < tokens.size(); i += kChunk) {
    const size_t n = std::min<size_t>(kChunk, tokens.size() - i);
    const bool last = i + n == tokens.size();
    engine.forward(std::span(tokens).subspan(i, n), *cache, last ? Logits::last : Logits::none, logits);
  }
  engine.end_prompt(*cache);
  out.push_back(logits);
  for (int d = 1; d < kDecode; ++d) {
    const auto token = int32_t(argmax(logits.data(), model.config().vocab));
    engine.forward(std::span(&token, 1), *cache, Logits::last, logits);
    out.push_back(logits);
  }
  return out;
}

// Every sequence in one batch per step: prompts join at their start step and are prefilled in
// chunks while the others decode.
std::vector<std::vector<std::vector<float>>> together(Engine& engine) {
  const Model& model = engine.model();
  const size_t n = std::size(kSeqs);
  std::vector<std::unique_ptr<ModelCache>> caches;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<size_t> fed(n, 0);
  std::vector<int32_t> next(n, 0);
  std::vector<std::vector<float>> logits(n);
  std::vector<std::vector<std::vector<float>>> out(n);
  for (const Seq& s : kSeqs) {
    caches.push_back(engine.make_cache(config_for(s.method)));
    prompts.push_back(model.tokenizer().encode(s.prompt, true));
  }
  for (int step = 0;; ++step) {
    std::vector<SequenceStep> steps;
    std::vector<size_t> who;
    for (size_t i = 0; i < n; ++i) {
      if (step < kSeqs[i].start || out[i].size() == size_t(kDecode)) continue;
      if (fed[i] < prompts[i].size()) {
        if (fed[i] == 0) engine.begin_prompt(*caches[i]);
        const size_t k = std::min<size_t>(kChunk, prompts[i].size() - fed[i]);
        const bool last = fed[i] + k == prompts[i].size();
        steps.push_back({std::span(prompts[i]).subspan(fed[i], k), caches[i].get(), last ? Logits::last : Logits::none,
                         &logits[i]});
        fed[i] += k;
      } else {
        steps.push_back({std::span(&next[i], 1), caches[i].get(), Logits::last, &logits[i]});
      }
      who.push_back(i);
    }
    if (steps.empty()) break;
    engine.forward_batch(steps);
    for (size_t j = 0; j < who.size(); ++j) {
      const size_t i = who[j];
      if (steps[j].mode == Logits::none) continue;
      if (out[i].empty()) engine.end_prompt(*caches[i]);
      out[i].push_back(logits[i]);
      next[i] = int32_t(argmax(logits[i].data(), model.config().vocab));
    }
  }
  return out;
}

void expect_batched_equals_alone(const Model& model, ThreadPool* pool) {
  Engine engine(model, pool);
  const auto batched = together(engine);
  for (size_t i = 0; i < std::size(kSeqs); ++i) {
    SCOPED_TRACE(kSeqs[i].method);
    const auto single = alone(engine, kSeqs[i]);
    ASSERT_EQ(batched[i].size(), single.size());
    for (size_t d = 0; d < single.size(); ++d) {
      ASSERT_EQ(batched[i][d], single[d]) << "step " << d;  // bit for bit
    }
  }
}

TEST(ForwardBatch, EachSequenceGetsTheLogitsItGetsAlone) { expect_batched_equals_alone(stories(), nullptr); }

TEST(ForwardBatch, WithAThreadPoolToo) {
  ThreadPool pool(2);
  expect_batched_equals_alone(stories(), &pool);
}

// stories260K is F32; the quantised kernels quantise activations per token and take 4 tokens at
// a time (batches of 5 or more rows mix both paths), which must not change any row either.
TEST(ForwardBatch, QuantisedWeightsToo) {
  for (const bool k_quants : {false, true}) {
    SCOPED_TRACE(k_quants ? "q4_k_m" : "q8_0");
    RandomModelSpec spec;
    spec.dim = 256;
    spec.n_heads = 4;
    spec.n_kv_heads = 2;
    spec.ffn_dim = 512;
    spec.weight_type = k_quants ? TensorType::q4_k : TensorType::q8_0;
    spec.k_quant_mix = k_quants;
    const std::string path = (test::temp_dir() / "squeezekv_forward_batch_test.gguf").string();
    write_random_model(path, spec);
    const Model model = Model::load(path);
    std::filesystem::remove(path);
    ThreadPool pool(2);
    expect_batched_equals_alone(model, &pool);
  }
}

TEST(ForwardBatch, TheEvictingCachesEvicted) {
  // Guards the test above against passing only because nothing was ever evicted.
  Engine engine(stories(), nullptr);
  auto cache = engine.make_cache(config_for("h2o"));
  const auto tokens = stories().tokenizer().encode(kSeqs[1].prompt, true);
  std::vector<float> logits;
  engine.forward(tokens, *cache, Logits::last, logits);
  EXPECT_LT(cache->layer(0).tokens_kept(), int(tokens.size()));
}

TEST(ForwardBatch, RejectsASharedCacheAndAnEmptyBatch) {
  Engine engine(stories(), nullptr);
  auto cache = engine.make_cache(config_for("full"));
  const int32_t token = 1;
  std::vector<float> a, b;
  const SequenceStep twice[2] = {{std::span(&token, 1), cache.get(), Logits::last, &a},
                                 {std::span(&token, 1), cache.get(), Logits::last, &b}};
  EXPECT_THROW(engine.forward_batch(twice), InvalidArgument);
  EXPECT_THROW(engine.forward_batch({}), InvalidArgument);
}

}  // namespace
}  // namespace squeezekv
