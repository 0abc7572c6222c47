// The engine against llama.cpp's reference figures on the real stories260K model
// (../shared/docs/reference-figures.md), and on random models of every weight type.
#include "squeezekv/engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "squeezekv/base/errors.h"
#include "squeezekv/engine/generate.h"
#include "squeezekv/engine/random_model.h"
#include "squeezekv/eval/perplexity.h"
#include "test_util.h"
#include "stories_model.h"

namespace squeezekv {
namespace {

const char* kText = test::kTinyStoriesText;

using test::stories;

std::vector<float> last_logits(const Model& model, const std::vector<int32_t>& tokens, KVType kv_type,
                               ThreadPool* pool = nullptr, int batch = 512) {
  Engine engine(model, pool);
  KVCacheConfig c;
  c.method = "full";
  c.kv_type = kv_type;
  auto cache = engine.make_cache(c);
  std::vector<float> logits;
  for (size_t i = 0; i < tokens.size(); i += size_t(batch)) {
    const size_t n = std::min(size_t(batch), tokens.size() - i);
    engine.forward(std::span(tokens).subspan(i, n), *cache, Logits::last, logits);
  }
  return logits;
}

struct Expected {
  int32_t id;
  float logit;
};

void expect_top5(const std::vector<float>& logits, const std::vector<Expected>& top, double tol) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                    [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(order[i], top[i].id) << "rank " << i + 1;
    EXPECT_NEAR(logits[size_t(top[i].id)], top[i].logit, tol) << "token " << top[i].id;
  }
}

const std::vector<Expected> kOnceUponATime = {
    {432, 17.799397f}, {383, 14.281260f}, {322, 9.709650f}, {353, 9.587288f}, {323, 9.134243f}};

TEST(EngineStories, ModelShapeFromMetadata) {
  const ModelConfig& c = stories().config();
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.ffn_dim, 172);
  EXPECT_EQ(c.vocab, 512);
  EXPECT_EQ(c.n_rot, 8);
  EXPECT_FLOAT_EQ(c.rope_base, 10000.0f);
  EXPECT_FALSE(c.tied_embeddings);
}

TEST(EngineStories, TopFiveLogitsMatchLlamaCppExact) {
  const auto tokens = stories().tokenizer().encode("Once upon a time", true);
  ASSERT_EQ(tokens, (std::vector<int32_t>{1, 403, 407, 261, 378}));
  const auto logits = last_logits(stories(), tokens, KVType::f32);
  expect_top5(logits, kOnceUponATime, 1e-4);
  EXPECT_NEAR(logsumexp(logits.data(), 512), 17.831099, 1e-4);
}

TEST(EngineStories, TopFiveLogitsWithTheF16Cache) {
  const auto tokens = stories().tokenizer().encode("Once upon a time", true);
  expect_top5(last_logits(stories(), tokens, KVType::f16), kOnceUponATime, 5e-3);
}

TEST(EngineStories, LogitsAtPositionZero) {
  expect_top5(last_logits(stories(), {1}, KVType::f32),
              {{403, 17.023516f}, {385, 15.406212f}, {410, 13.108263f}, {317, 12.769169f}, {407, 12.418087f}}, 1e-4);
}

TEST(EngineStories, BatchedPrefillEqualsTokenByToken) {
  const auto tokens = stories().tokenizer().encode("Once upon a time there was a dog named Max.", true);
  const auto batched = last_logits(stories(), tokens, KVType::f32);
  const auto single = last_logits(stories(), tokens, KVType::f32, nullptr, 1);
  for (size_t i = 0; i < batched.size(); ++i) EXPECT_NEAR(batched[i], single[i], 2e-5);
}

TEST(EngineStories, FirstEightGreedyTokens) {
  Engine engine(stories(), nullptr);
  auto cache = engine.make_cache(KVCacheConfig{.method = "full"});
  GenerateOptions options;
  options.n_predict = 8;
  options.sampler.temperature = 0.0f;
  const GenerateResult r = generate(engine, *cache, "Once upon a time", options);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{432, 383, 286, 261, 376, 298, 315, 421}));
  // (reference-figures.md glosses these ids as "... girl named"; they decode to "... girl".)
  EXPECT_EQ(stories().tokenizer().decode(r.tokens), ", there was a little girl");
}

TEST(EngineStories, OneAndTwoThreadsGiveIdenticalLogits) {
  const auto tokens = stories().tokenizer().encode("The cat sat on the mat and looked at the bird.", true);
  ThreadPool two(2);
  const auto a = last_logits(stories(), tokens, KVType::f16, nullptr, 4);
  const auto b = last_logits(stories(), tokens, KVType::f16, &two, 4);
  EXPECT_EQ(a, b);
}

struct PerplexityCase {
  int n_ctx, chunks;
  double ppl, nll;
};

class EnginePerplexity : public ::testing::TestWithParam<PerplexityCase> {};

TEST_P(EnginePerplexity, MatchesLlamaPerplexity) {
  const PerplexityCase p = GetParam();
  static const std::vector<int32_t> tokens = tokenize_text_file(stories().tokenizer(), kText);
  ASSERT_EQ(tokens.size(), 393018u);
  Engine engine(stories(), nullptr);
  KVCacheConfig full;
  full.method = "full";
  full.kv_type = KVType::f32;
  PerplexityOptions options;
  options.n_ctx = p.n_ctx;
  options.max_chunks = p.chunks;
  options.n_batch = 64;
  const auto r = evaluate_perplexity(engine, tokens, std::span(&full, 1), options).front();
  EXPECT_EQ(r.chunks, p.chunks);
  EXPECT_EQ(r.scored, int64_t(p.chunks) * (p.n_ctx / 2 - 1));
  EXPECT_NEAR(r.perplexity, p.ppl, 5e-4);
  EXPECT_NEAR(r.mean_nll, p.nll, 1e-5 * p.nll);
  EXPECT_EQ(r.mean_kl, 0.0);
  EXPECT_EQ(r.top1_agreement, 1.0);
}

INSTANTIATE_TEST_SUITE_P(
    Reference, EnginePerplexity,
    ::testing::Values(PerplexityCase{128, 1, 3.535697, 1.262910315}, PerplexityCase{128, 400, 4.006826, 1.387999496},
                      PerplexityCase{256, 1, 4.044410, 1.397335669}, PerplexityCase{256, 200, 3.917316, 1.365406851}),
    [](const auto& case_info) {
      return "ctx" + std::to_string(case_info.param.n_ctx) + "_chunks" + std::to_string(case_info.param.chunks);
    });

// ---- random models: every weight type and both architectures ----

std::string temp_path(const std::string& name) {
  return (test::temp_dir() / ("squeezekv_engine_test_" + name + ".gguf")).string();
}

std::vector<float> random_model_logits(const RandomModelSpec& spec, const std::string& name) {
  const std::string path = temp_path(name);
  write_random_model(path, spec);
  const Model model = Model::load(path);
  std::filesystem::remove(path);
  const std::vector<int32_t> tokens = {1, 300, 301, 302, 259, 400, 12, 3};
  return last_logits(model, tokens, KVType::f32);
}

TEST(EngineRandom, EveryWeightTypeStaysCloseToF32) {
  for (const char* arch : {"llama", "qwen2"}) {
    RandomModelSpec spec;
    spec.arch = arch;
    spec.dim = 256;
    spec.n_heads = 4;
    spec.n_kv_heads = 2;
    spec.ffn_dim = 512;
    spec.vocab = 512;
    spec.seed = 7;
    const auto reference = random_model_logits(spec, std::string(arch) + "_f32");
    double norm = 0;
    for (float x : reference) norm += double(x) * x;
    // Relative RMS error of the logits. Random weights carry no structure, so each quantised
    // matrix adds its full rounding noise (per weight about 0.5 % for Q8_0, 2 % Q6_K, 8-9 % for
    // the 4-bit types) and it compounds through the layers; the bounds are about 1.5x the error
    // measured on this model (0.0008, 0.007, 0.023, 0.069, 0.26, 0.33 at worst over both archs;
    // Q4_1 0.24, Q5_0 0.15).
    const std::vector<std::pair<TensorType, double>> types = {
        {TensorType::f16, 2e-3}, {TensorType::bf16, 1.5e-2}, {TensorType::q8_0, 4e-2}, {TensorType::q6_k, 0.1},
        {TensorType::q4_k, 0.4}, {TensorType::q4_0, 0.5},    {TensorType::q4_1, 0.37}, {TensorType::q5_0, 0.22}};
    for (const auto& [type, tol] : types) {
      spec.weight_type = type;
      const auto logits =
          random_model_logits(spec, std::string(arch) + "_" + std::string(tensor_type_name(uint32_t(type))));
      double err = 0;
      for (size_t i = 0; i < logits.size(); ++i) err += double(logits[i] - reference[i]) * (logits[i] - reference[i]);
      const double rel = std::sqrt(err / norm);
      std::printf("%s %s: relative RMS logit error %.4f\n", arch, std::string(tensor_type_name(uint32_t(type))).c_str(),
                  rel);
      EXPECT_LT(rel, tol) << arch << " " << tensor_type_name(uint32_t(type));
    }
  }
}

// A random Q8_0 Llama with 8 query heads and 2 layers, loaded (its file removed at once).
Model random_q8_model(int dim, int n_kv_heads, int ffn_dim, const std::string& name) {
  RandomModelSpec spec;
  spec.dim = dim;
  spec.n_layers = 2;
  spec.n_heads = 8;
  spec.n_kv_heads = n_kv_heads;
  spec.ffn_dim = ffn_dim;
  spec.weight_type = TensorType::q8_0;
  const std::string path = temp_path(name);
  write_random_model(path, spec);
  Model model = Model::load(path);
  std::filesystem::remove(path);
  return model;
}

std::vector<int32_t> counting_prompt(int n) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < n; ++i) prompt.push_back(int32_t(3 + (i * 37) % 500));
  return prompt;
}

// The prompt's logits (`mode`), then those of `steps` decode steps, on `threads` threads; the
// cache's slots over layer 0's heads at the end go to *slots when given.
std::vector<float> prompt_then_decode(const Model& model, size_t threads, const KVCacheConfig& c,
                                      const std::vector<int32_t>& prompt, Logits mode, int steps,
                                      int64_t* slots = nullptr) {
  ThreadPool pool(threads);
  Engine engine(model, &pool);
  auto cache = engine.make_cache(c);
  std::vector<float> logits, all;
  engine.begin_prompt(*cache);
  engine.forward(prompt, *cache, mode, logits);
  engine.end_prompt(*cache);
  all = logits;
  for (int step = 0; step < steps; ++step) {
    const int32_t token = int32_t(10 + step);
    engine.forward(std::span(&token, 1), *cache, Logits::last, logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  if (slots != nullptr) {
    *slots = 0;
    for (int h = 0; h < cache->layer(0).n_heads(); ++h) *slots += cache->layer(0).head(h).n_slots();
  }
  return all;
}

// A model big enough that every parallel path runs (matmuls over kMatmulParallelMacs, attention
// split over KV heads): prompt and decode logits, and the cache's choices, must not depend on
// the thread count. Evicting caches with both score sources, so the fed-back attention is covered.
TEST(EngineRandom, ThreadCountNeverChangesTheOutput) {
  const Model model = random_q8_model(512, 2, 1024, "threads");
  const std::vector<int32_t> prompt = counting_prompt(150);
  for (const char* method : {"full", "squeeze"}) {
    for (ScoreSource score : {ScoreSource::key_proxy, ScoreSource::attention}) {
      SCOPED_TRACE(std::string(method) + (score == ScoreSource::attention ? " attention" : " key-proxy"));
      KVCacheConfig c;
      c.method = method;
      c.budget = 64;
      c.score = score;
      std::vector<std::vector<float>> runs;
      for (size_t threads : {1u, 2u, 3u}) runs.push_back(prompt_then_decode(model, threads, c, prompt, Logits::all, 8));
      EXPECT_EQ(runs[0], runs[1]);
      EXPECT_EQ(runs[0], runs[2]);
    }
  }
}

// One KV head for 8 query heads (as Gemma 3's one): a decode step splits the group's query heads
// across the workers (2 parts on 2 threads, 3 on 3), each part a different number of queries;
// the logits must be those of one thread, for row formats and KIVI, and for a policy that feeds
// attention back (which keeps the group whole). 600 rows: 8 heads x 600 x 64 is above
// kMatmulParallelMacs, so the attention goes to the pool.
TEST(EngineRandom, ThreadCountNeverChangesASingleKVHeadsDecode) {
  const Model model = random_q8_model(512, 1, 1024, "threads_one_kv_head");
  const std::vector<int32_t> prompt = counting_prompt(600);
  for (const char* method : {"full", "window", "h2o"}) {
    for (const char* kv : {"f16", "q8_0", "kivi2"}) {
      SCOPED_TRACE(std::string(method) + " " + kv);
      KVCacheConfig c;
      c.method = method;
      c.budget = 580;
      c.set("kv_type", kv);
      std::vector<std::vector<float>> runs;
      for (size_t threads : {1u, 2u, 3u})
        runs.push_back(prompt_then_decode(model, threads, c, prompt, Logits::last, 8));
      EXPECT_EQ(runs[0], runs[1]);
      EXPECT_EQ(runs[0], runs[2]);
    }
  }
}

// Caches large enough that each layer's per-head bookkeeping runs on the pool (4 KV heads x 531
// slots >= kParallelHeadSlots), with policies that score heads alone and one that does not (tova).
TEST(EngineRandom, ThreadCountNeverChangesALargeEvictingCache) {
  const Model model = random_q8_model(256, 4, 512, "threads_large");
  const std::vector<int32_t> prompt = counting_prompt(560);
  for (const char* method : {"h2o", "chunkkv", "tova", "window"}) {
    for (const char* kv : {"f16", "kivi2"}) {
      SCOPED_TRACE(std::string(method) + " " + kv);
      KVCacheConfig c;
      c.method = method;
      c.budget = 530;
      c.set("kv_type", kv);
      std::vector<std::vector<float>> runs;
      for (size_t threads : {1u, 2u, 3u}) {
        int64_t slots = 0;
        runs.push_back(prompt_then_decode(model, threads, c, prompt, Logits::last, 12, &slots));
        EXPECT_GE(slots, kParallelHeadSlots);
      }
      EXPECT_EQ(runs[0], runs[1]);
      EXPECT_EQ(runs[0], runs[2]);
    }
  }
}

TEST(EngineRandom, TiedEmbeddingsUseTheTokenEmbedding) {
  RandomModelSpec spec;
  spec.tied_embeddings = true;
  const std::string path = temp_path("tied");
  write_random_model(path, spec);
  const Model model = Model::load(path);
  std::filesystem::remove(path);
  EXPECT_TRUE(model.config().tied_embeddings);
  EXPECT_EQ(model.output().data, model.token_embedding().data);
  EXPECT_EQ(last_logits(model, {1, 300}, KVType::f32).size(), size_t(spec.vocab));
}

// ---- bad input ----

TEST(EngineBadInput, MissingModelFileNamesThePath) {
  try {
    Model::load("no/such/model.gguf");
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/model.gguf"), std::string::npos) << e.what();
  }
}

// Copies the stories260K file into a writer, changing one thing: a key's value, a dropped key or
// a dropped tensor. Returns the path of the written file.
std::string rewritten(const std::string& name, const std::string& drop_key, const std::string& arch,
                      const std::string& drop_tensor) {
  const GgufFile& src = stories().file();
  GgufWriter out;
  for (std::string_view key : src.keys()) {
    if (key == drop_key) continue;
    const GgufValue& v = src.get(key);
    const std::string k(key);
    if (key == "general.architecture") {
      out.add_string(k, arch);
      continue;
    }
    switch (v.type()) {
      case GgufType::u32:
        out.add_u32(k, v.as_u32());
        break;
      case GgufType::f32:
        out.add_f32(k, v.as_f32());
        break;
      case GgufType::string:
        out.add_string(k, v.as_string());
        break;
      case GgufType::array:
        if (v.array_type() == GgufType::string) {
          std::vector<std::string> items(v.strings().begin(), v.strings().end());
          out.add_array(k, std::span<const std::string>(items));
        } else if (v.array_type() == GgufType::f32) {
          const std::vector<float> items = v.to_f32s();
          out.add_array(k, std::span<const float>(items));
        } else {
          const std::vector<int32_t> items = v.to_i32s();
          out.add_array(k, std::span<const int32_t>(items));
        }
        break;
      default:
        ADD_FAILURE() << "unexpected key type in " << k;
        break;
    }
  }
  for (const GgufTensor& t : src.tensors()) {
    if (t.name == drop_tensor) continue;
    out.add_raw_tensor(
        t.name, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), t.type_id,
        std::vector<uint8_t>(static_cast<const uint8_t*>(t.data), static_cast<const uint8_t*>(t.data) + t.n_bytes));
  }
  const std::string path = temp_path(name);
  out.write(path);
  return path;
}

void expect_load_error(const std::string& path, const std::string& needle) {
  try {
    Model::load(path);
    ADD_FAILURE() << "loaded " << path;
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(EngineBadInput, TheUnmodifiedCopyLoads) {
  const std::string path = rewritten("copy", "", "llama", "");
  EXPECT_EQ(Model::load(path).config().n_layers, 5);
  std::filesystem::remove(path);
}

TEST(EngineBadInput, UnsupportedArchitecture) {
  expect_load_error(rewritten("arch", "", "mamba", ""), "general.architecture = 'mamba'");
}

TEST(EngineBadInput, MissingTensor) {
  expect_load_error(rewritten("tensor", "", "llama", "blk.3.ffn_up.weight"), "missing tensor 'blk.3.ffn_up.weight'");
}

TEST(EngineBadInput, MissingKey) {
  expect_load_error(rewritten("key", "llama.embedding_length", "llama", ""), "llama.embedding_length");
}

TEST(EngineBadInput, PromptLongerThanTheContext) {
  Engine engine(stories(), nullptr);
  auto cache = engine.make_cache(KVCacheConfig{.method = "full"});
  GenerateOptions options;
  options.n_ctx = 8;
  options.n_predict = 4;
  EXPECT_THROW(generate(engine, *cache, "Once upon a time there was", options), InvalidArgument);
}

TEST(EngineBadInput, CacheOfTheWrongShape) {
  Engine engine(stories(), nullptr);
  KVCacheConfig c;
  c.method = "full";
  c.head_dim = 16;
  ModelCache wrong(c, 5, 4);
  std::vector<float> logits;
  const std::vector<int32_t> tokens = {1};
  EXPECT_THROW(engine.forward(tokens, wrong, Logits::last, logits), InvalidArgument);
}

}  // namespace
}  // namespace squeezekv
