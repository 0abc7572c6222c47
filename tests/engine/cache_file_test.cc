// A saved and reloaded cache continues exactly as the cache that was never saved: the same logits,
// bit for bit, hence the same greedy tokens, for every registered policy with every allocator it
// takes, every K/V storage format, every method id, sliding layers and the position rules; saved
// in the middle of a prompt (the policies' prompt state), after it, and mid-generation. Then the
// files the loader must refuse, each with a message naming the file and what does not match.
#include "squeezekv/engine/cache_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "squeezekv/base/errors.h"
#include "squeezekv/base/fnv1a.h"
#include "squeezekv/engine/engine.h"
#include "squeezekv/engine/random_model.h"
#include "squeezekv/eval/continuation_perplexity.h"
#include "squeezekv/methods/registry.h"
#include "squeezekv/ops/kv_format.h"
#include "test_util.h"

namespace squeezekv {
namespace {

std::string model_file(const std::string& arch, uint64_t seed) {
  RandomModelSpec spec;
  spec.arch = arch;
  spec.dim = 128;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;  // head_dim 32: one block of q8_0 / q4_0, four KIVI groups of 8
  spec.ffn_dim = 128;
  spec.sliding_window = 24;
  spec.seed = seed;
  const std::string path = (test::temp_dir() / ("cache_file_" + arch + std::to_string(seed) + ".gguf")).string();
  if (!std::filesystem::exists(path)) write_random_model(path, spec);
  return path;
}

const Model& llama() {
  static const Model model = Model::load(model_file("llama", 1));
  return model;
}

// Saves at `save_at` (-1: never) and continues from the file in a fresh cache.
enum SavePoint { never = -1, mid_prompt = 0, after_prompt = 1, mid_generation = 2 };

struct RunResult {
  std::vector<float> logits;  // every step's last logits, in order
  std::vector<int32_t> tokens;
  uint64_t file_bytes = 0;
  size_t kept_bytes = 0;
};

RunResult run(const Model& model, const KVCacheConfig& config, SavePoint save_at, int n_decode = 24) {
  Engine engine(model, nullptr);
  std::unique_ptr<ModelCache> cache = engine.make_cache(config);
  RunResult out;
  std::vector<int32_t> seen;
  const std::string path = (test::temp_dir() / "cache_file_test.skv").string();
  auto save_and_load = [&] {
    out.kept_bytes = cache->kept_bytes();
    out.file_bytes = save_cache_file(path, model, *cache, seen);
    LoadedCache loaded = load_cache_file(path, model);
    EXPECT_EQ(loaded.contents.tokens, seen);
    EXPECT_EQ(loaded.cache->config(), cache->config());
    EXPECT_EQ(loaded.cache->kept_bytes(), cache->kept_bytes());
    cache = std::move(loaded.cache);  // the saved one is gone: only the file goes on
  };
  std::vector<int32_t> prompt;
  for (int i = 0; i < 100; ++i) prompt.push_back(int32_t(3 + (i * 37 + i * i) % 500));
  std::vector<float> logits;
  if (BudgetCoordinator* c = cache->coordinator()) c->set_max_rows(int(prompt.size()) + n_decode);
  engine.begin_prompt(*cache);
  for (size_t first = 0; first < prompt.size(); first += 32) {
    if (first == 96 && save_at == mid_prompt) save_and_load();  // before the last, short chunk
    const std::span<const int32_t> chunk =
        std::span(prompt).subspan(first, std::min<size_t>(32, prompt.size() - first));
    engine.forward(chunk, *cache, Logits::last, logits);
    seen.insert(seen.end(), chunk.begin(), chunk.end());
  }
  engine.end_prompt(*cache);
  out.logits = logits;
  if (save_at == after_prompt) save_and_load();
  for (int i = 0; i < n_decode; ++i) {
    if (i == 7 && save_at == mid_generation) save_and_load();
    const auto token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.tokens.push_back(token);
    engine.forward(std::span(&token, 1), *cache, Logits::last, logits);
    seen.push_back(token);
    out.logits.insert(out.logits.end(), logits.begin(), logits.end());
  }
  return out;
}

void expect_same_continuations(const Model& model, const KVCacheConfig& config) {
  const RunResult reference = run(model, config, never);
  for (const SavePoint at : {mid_prompt, after_prompt, mid_generation}) {
    SCOPED_TRACE("saved at point " + std::to_string(int(at)));
    const RunResult loaded = run(model, config, at);
    EXPECT_EQ(loaded.tokens, reference.tokens);
    ASSERT_EQ(loaded.logits.size(), reference.logits.size());
    EXPECT_EQ(std::memcmp(loaded.logits.data(), reference.logits.data(), loaded.logits.size() * sizeof(float)), 0)
        << "logits differ after the reload";
  }
}

KVCacheConfig base_config() {
  KVCacheConfig config;
  config.budget = 40;
  config.n_sink = 4;
  config.score = ScoreSource::attention;
  config.kivi_group = 8;
  config.kivi_residual = 16;
  return config;
}

// Every policy with every allocator it takes, in every storage format.
TEST(CacheFile, EveryPolicyAllocatorAndFormatContinuesExactly) {
  int runs = 0;
  for (const PolicyInfo* policy : all_policies()) {
    for (const AllocatorInfo* allocator : all_allocators()) {
      // A pair the config refuses: the full policy and its unbounded allocator go together, and a
      // ranking across layers takes only scores that rank across layers.
      if (policy->keeps_every_row != allocator->unbounded) continue;
      if (allocator->ranks_globally && !policy->ranks_across_layers) continue;
      for (const KVFormat& format : kKVFormats) {
        KVCacheConfig config = base_config();
        config.policy = std::string(policy->id);
        config.allocator = std::string(allocator->id);
        config.kv_type = format.type;
        SCOPED_TRACE(config.policy + " / " + config.allocator + " / " + std::string(format.name));
        config.validate();
        expect_same_continuations(llama(), config);
        ++runs;
      }
    }
  }
  EXPECT_GE(runs, int(all_policies().size() * kKVFormatCount));
}

// Every method id as the registry defines it (its head split, storage preset, overrides).
TEST(CacheFile, EveryMethodContinuesExactly) {
  for (const MethodInfo& method : all_methods()) {
    KVCacheConfig config = base_config();
    config.method = std::string(method.id);
    SCOPED_TRACE(config.method);
    config.validate();
    expect_same_continuations(llama(), config);
  }
}

TEST(CacheFile, PositionRulesAndKeyProxyScoresContinueExactly) {
  for (const PolicyInfo* policy : all_policies()) {
    for (const PositionRule rule : {PositionRule::cache, PositionRule::text}) {
      KVCacheConfig config = base_config();
      config.policy = std::string(policy->id);
      config.allocator = policy->keeps_every_row ? "none" : "uniform";
      config.positions = rule;
      config.score = ScoreSource::key_proxy;
      SCOPED_TRACE(config.policy + " positions " + to_string(rule));
      expect_same_continuations(llama(), config);
    }
  }
  KVCacheConfig clamped = base_config();  // the span rule with rows beyond its distance
  clamped.max_distance = 48;
  expect_same_continuations(llama(), clamped);
}

TEST(CacheFile, SlidingLayersContinueExactly) {
  const Model gemma = Model::load(model_file("gemma3", 1));
  for (const char* method : {"squeeze", "streaming", "full"}) {
    KVCacheConfig config = base_config();
    config.method = method;
    SCOPED_TRACE(method);
    expect_same_continuations(gemma, config);
  }
}

// perplexity --load-cache: a text scored after a loaded cache has the perplexity it has after the
// cache that was never saved, exactly, for every method id.
TEST(CacheFile, APerplexityAfterALoadIsTheNeverSavedCachesExactly) {
  std::vector<int32_t> history, text;
  for (int i = 0; i < 80; ++i) history.push_back(int32_t(7 + (i * 53) % 500));
  for (int i = 0; i < 40; ++i) text.push_back(int32_t(11 + (i * 29) % 500));
  const std::string path = (test::temp_dir() / "perplexity.skv").string();
  for (const MethodInfo& method : all_methods()) {
    KVCacheConfig config = base_config();
    config.method = std::string(method.id);
    SCOPED_TRACE(config.method);
    Engine engine(llama(), nullptr);
    auto never_saved = engine.make_cache(config);
    (void)continuation_perplexity(engine, *never_saved, history, 16);
    const ContinuationResult expected = continuation_perplexity(engine, *never_saved, text, 16);
    auto saved = engine.make_cache(config);
    (void)continuation_perplexity(engine, *saved, history, 16);
    save_cache_file(path, llama(), *saved, history);
    LoadedCache loaded = load_cache_file(path, llama());
    const ContinuationResult got = continuation_perplexity(engine, *loaded.cache, text, 16);
    EXPECT_EQ(got.scored, expected.scored);
    EXPECT_EQ(got.mean_nll, expected.mean_nll);
  }
}

TEST(CacheFile, FileHoldsAboutTheResidentBytes) {
  KVCacheConfig config = base_config();
  config.method = "squeeze";
  const RunResult r = run(llama(), config, after_prompt);
  // The rows' bytes, plus per row its score, position and shift (16 bytes beside this model's
  // 128 of K and V), plus the headers (the configuration's names, the 100 tokens).
  EXPECT_GT(r.file_bytes, r.kept_bytes);
  EXPECT_LT(double(r.file_bytes), 1.3 * double(r.kept_bytes));
}

// ---- files the loader refuses

std::string saved_file(const std::string& name) {
  Engine engine(llama(), nullptr);
  auto cache = engine.make_cache(base_config());
  std::vector<int32_t> tokens;
  for (int i = 0; i < 60; ++i) tokens.push_back(int32_t(5 + i));
  std::vector<float> logits;
  engine.forward(tokens, *cache, Logits::last, logits);
  const std::string path = (test::temp_dir() / name).string();
  save_cache_file(path, llama(), *cache, tokens);
  return path;
}

std::vector<char> bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

// The load fails with FormatError whose message names the file and contains `what`.
void expect_refused(const std::string& path, const Model& model, const std::string& what) {
  try {
    (void)load_cache_file(path, model);
    ADD_FAILURE() << "loaded " << path;
  } catch (const FormatError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(what), std::string::npos) << message;
  }
}

TEST(CacheFile, RefusesTruncatedFiles) {
  const std::string path = saved_file("truncated.skv");
  const std::vector<char> whole = bytes_of(path);
  for (const size_t keep : {size_t(0), size_t(7), size_t(30), whole.size() / 2, whole.size() - 1}) {
    write_bytes(path, std::vector<char>(whole.begin(), whole.begin() + long(keep)));
    SCOPED_TRACE(keep);
    EXPECT_THROW((void)load_cache_file(path, llama()), FormatError);
  }
  write_bytes(path, std::vector<char>(whole.begin(), whole.end() - 100));
  expect_refused(path, llama(), "truncated");
}

TEST(CacheFile, RefusesAFlippedByteAnywhere) {
  const std::string path = saved_file("flipped.skv");
  const std::vector<char> whole = bytes_of(path);
  for (size_t at = 0; at < whole.size(); at += 1 + whole.size() / 300) {
    std::vector<char> bytes = whole;
    bytes[at] = char(bytes[at] ^ 0x10);
    write_bytes(path, bytes);
    SCOPED_TRACE(at);
    EXPECT_THROW((void)load_cache_file(path, llama()), FormatError);
  }
  std::vector<char> bytes = whole;
  bytes[bytes.size() - 3] = char(bytes[bytes.size() - 3] ^ 1);
  write_bytes(path, bytes);
  expect_refused(path, llama(), "checksum");
}

TEST(CacheFile, RefusesAnotherModelOrVersion) {
  const std::string path = saved_file("other.skv");
  const Model other = Model::load(model_file("llama", 2));  // the same shapes, other weights
  expect_refused(path, other, "weights differ");
  const Model gemma = Model::load(model_file("gemma3", 1));
  expect_refused(path, gemma, "architecture");
  std::vector<char> bytes = bytes_of(path);
  bytes[8] = 9;  // the format version
  write_bytes(path, bytes);
  expect_refused(path, llama(), "format version 9");
  write_bytes(path, std::vector<char>(64, 'x'));
  expect_refused(path, llama(), "not a squeezekv cache file");
  expect_refused((test::temp_dir() / "absent.skv").string(), llama(), "cannot be read");
}

TEST(CacheFile, RefusesPathsThatCannotBeWritten) {
  Engine engine(llama(), nullptr);
  auto cache = engine.make_cache(base_config());
  const std::vector<int32_t> none;
  for (const std::string& path : {std::string("/dev/full"), (test::temp_dir() / "no/such/dir/x.skv").string()}) {
    try {
      save_cache_file(path, llama(), *cache, none);
      ADD_FAILURE() << "wrote " << path;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(std::filesystem::exists(test::temp_dir() / "no"));
  // Tokens that are not what the cache has seen are refused before anything is written.
  const std::vector<int32_t> one = {1};
  EXPECT_THROW(save_cache_file((test::temp_dir() / "x.skv").string(), llama(), *cache, one), InvalidArgument);
}

TEST(CacheFile, LoadsOnlyIntoAnEmptyCacheAndLeavesNothingHalfLoaded) {
  const std::string path = saved_file("state.skv");
  const CacheFileInfo info = read_cache_file_info(path);
  EXPECT_EQ(info.contents.tokens.size(), 60u);
  EXPECT_EQ(info.cache->layer(0).tokens_seen(), 60);
  // The state section's bytes fed into a cache with a corrupt tail: the cache is left empty.
  Engine engine(llama(), nullptr);
  auto cache = engine.make_cache(base_config());
  StateWriter out;
  info.cache->save_state(out);
  std::vector<std::byte> bytes = out.bytes();
  bytes.resize(bytes.size() - 5);
  StateReader in(bytes);
  EXPECT_THROW(cache->load_state(in), FormatError);
  EXPECT_EQ(cache->layer(0).tokens_seen(), 0);
  EXPECT_EQ(cache->kept_bytes(), 0u);
  StateReader whole(out.bytes());
  cache->load_state(whole);
  EXPECT_EQ(cache->kept_bytes(), info.cache->kept_bytes());
  StateReader again(out.bytes());
  EXPECT_THROW(cache->load_state(again), InvalidArgument);  // a cache that has seen tokens
}

}  // namespace
}  // namespace squeezekv
