// Gemma 3 on random models (random_model.h, arch gemma3): the layers' configuration read from the
// keys (llama.cpp's sliding pattern, two rope bases, the attention scale), keys that cannot be
// honoured refused by name, and the sliding window's exact reach in the forward pass.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "squeezekv/base/errors.h"
#include "squeezekv/engine/engine.h"
#include "squeezekv/engine/random_model.h"
#include "test_util.h"

namespace squeezekv {
namespace {

std::string temp_path(const std::string& name) {
  return (test::temp_dir() / ("squeezekv_gemma3_test_" + name + ".gguf")).string();
}

RandomModelSpec small_gemma3(int64_t layers, int64_t window) {
  RandomModelSpec s;
  s.arch = "gemma3";
  s.dim = 64;
  s.n_layers = layers;
  s.n_heads = 4;
  s.n_kv_heads = 1;
  s.head_dim = 32;  // heads x head_dim (128) wider than dim, as gemma3's 4 x 256 over 640
  s.ffn_dim = 128;
  s.vocab = 512;
  s.tied_embeddings = true;
  s.sliding_window = window;
  s.seed = 11;
  return s;
}

Model load_written(const GgufWriter& writer, const std::string& name) {
  const std::string path = temp_path(name);
  writer.write(path);
  Model model = Model::load(path);
  std::filesystem::remove(path);  // the mapping stays valid
  return model;
}

TEST(Gemma3Config, LayersFollowLlamaCppsSlidingPatternAndRopeBases) {
  const Model model = load_written(random_model_writer(small_gemma3(13, 8)), "pattern");
  const ModelConfig& c = model.config();
  EXPECT_EQ(c.arch, "gemma3");
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.q_dim(), 128);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.rope_style, RopeStyle::neox);
  EXPECT_EQ(c.embed_scale, std::sqrt(64.0f));
  ASSERT_EQ(c.layers.size(), 13u);
  for (size_t l = 0; l < 13; ++l) {
    const LayerConfig& lc = c.layers[l];
    const bool global = l % 6 == 5;  // five sliding layers, then a global one
    EXPECT_EQ(lc.attention, global ? AttentionKind::global : AttentionKind::sliding) << l;
    EXPECT_EQ(lc.window, global ? 0 : 8) << l;
    EXPECT_EQ(lc.rope_base, global ? 1000000.0f : 10000.0f) << l;
    EXPECT_TRUE(lc.qk_norm && lc.post_norms);
    EXPECT_EQ(lc.activation, Activation::gelu_tanh);
    EXPECT_EQ(lc.attention_scale, 1.0f / std::sqrt(32.0f));
  }
}

TEST(Gemma3Config, FileKeysOverrideTheDefaults) {
  GgufWriter w = random_model_writer(small_gemma3(4, 8));
  w.add_u32("gemma3.attention.sliding_window_pattern", 2);
  w.add_f32("gemma3.rope.freq_base_swa", 5000.0f);
  const Model model = load_written(w, "pattern2");
  for (size_t l = 0; l < 4; ++l) {
    const LayerConfig& lc = model.config().layers[l];
    EXPECT_EQ(lc.attention, l % 2 == 1 ? AttentionKind::global : AttentionKind::sliding) << l;
    EXPECT_EQ(lc.rope_base, l % 2 == 1 ? 1000000.0f : 5000.0f) << l;
  }
  // No window: every layer global.
  const Model global = load_written(random_model_writer(small_gemma3(3, 0)), "global");
  for (const LayerConfig& lc : global.config().layers) EXPECT_EQ(lc.attention, AttentionKind::global);
}

TEST(Gemma3Config, KeysThatCannotBeHonouredAreRefusedByName) {
  const std::vector<std::pair<std::string, float>> refused = {
      {"gemma3.final_logit_softcapping", 30.0f}, {"gemma3.rope.scaling.factor", 8.0f}, {"gemma3.novel_feature", 1.0f}};
  for (const auto& [key, value] : refused) {
    GgufWriter w = random_model_writer(small_gemma3(2, 8));
    w.add_f32(key, value);
    const std::string path = temp_path("refused");
    w.write(path);
    try {
      (void)Model::load(path);
      ADD_FAILURE() << key << " was accepted";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
    std::filesystem::remove(path);
  }
}

std::vector<float> last_logits(const Model& model, const std::vector<int32_t>& tokens, bool blocks) {
  Engine engine(model, nullptr);
  engine.set_prompt_blocks(blocks);
  KVCacheConfig config;
  config.method = "full";
  config.kv_type = KVType::f32;
  auto cache = engine.make_cache(config);
  std::vector<float> logits;
  engine.forward(tokens, *cache, Logits::last, logits);
  return logits;
}

// Two sliding layers of window 4: the last token's logits read the last 2 x (4 - 1) + 1 = 7
// tokens and nothing older, exactly (masked rows add exact zeros); a token 7 back does count.
TEST(Gemma3Engine, SlidingLayersSeeOnlyTheirWindow) {
  const Model model = load_written(random_model_writer(small_gemma3(2, 4)), "window");
  ASSERT_EQ(model.config().layers[1].attention, AttentionKind::sliding);
  std::vector<int32_t> a;
  for (int i = 0; i < 24; ++i) a.push_back(int32_t(3 + (i * 37) % 500));
  for (const bool blocks : {false, true}) {
    SCOPED_TRACE(blocks ? "prompt in blocks" : "token path");
    const std::vector<float> base = last_logits(model, a, blocks);
    std::vector<int32_t> old_changed = a;
    for (size_t i = 1; i + 7 < a.size(); ++i) old_changed[i] = int32_t(3 + (i * 91) % 500);
    EXPECT_EQ(last_logits(model, old_changed, blocks), base);
    std::vector<int32_t> in_reach = a;
    in_reach[a.size() - 7] = 400;
    EXPECT_NE(last_logits(model, in_reach, blocks), base);
  }
  // The same model without a window reads everything.
  const Model global = load_written(random_model_writer(small_gemma3(2, 0)), "nowindow");
  std::vector<int32_t> changed = a;
  changed[2] = 401;
  EXPECT_NE(last_logits(global, changed, false), last_logits(global, a, false));
}

// Prompt in blocks, token by token, and decode steps all agree (to float rounding) past the window.
TEST(Gemma3Engine, PromptAndDecodeAgreePastTheWindow) {
  const Model model = load_written(random_model_writer(small_gemma3(6, 8)), "decode");
  std::vector<int32_t> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back(int32_t(3 + (i * 53) % 500));
  const std::vector<float> whole = last_logits(model, tokens, true);
  Engine engine(model, nullptr);
  KVCacheConfig config;
  config.method = "full";
  config.kv_type = KVType::f32;
  auto cache = engine.make_cache(config);
  std::vector<float> logits;
  for (int32_t t : tokens) engine.forward(std::span(&t, 1), *cache, Logits::last, logits);
  ASSERT_EQ(logits.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_NEAR(logits[i], whole[i], 1e-3f * (1 + std::fabs(whole[i]))) << i;
}

TEST(Gemma3Engine, RandomModelWritesEveryPartOfTheBlock) {
  const std::string path = temp_path("parts");
  write_random_model(path, small_gemma3(1, 4));
  const GgufFile f = GgufFile::open(path);
  for (const char* name : {"blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight", "blk.0.post_attention_norm.weight",
                           "blk.0.post_ffw_norm.weight"}) {
    EXPECT_NE(f.find_tensor(name), nullptr) << name;
  }
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.bias"), nullptr);
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);  // tied
  EXPECT_EQ(f.find_u32("gemma3.attention.sliding_window"), 4u);
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->ne[1], 128);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace squeezekv
