// The server's pieces without HTTP: request checking (every bad input is a 4xx
// naming its field), and the admission promise, which must bound what a cache really holds.
#include <gtest/gtest.h>

#include "serve/admission.h"
#include "serve/json_error.h"
#include "serve/request.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/engine/engine.h"
#include "squeezekv/methods/registry.h"
#include "served.h"
#include "stories_model.h"
#include "test_util.h"

namespace squeezekv::serve {
namespace {

using test::stories;

RequestLimits limits() { return test::stories_limits(); }

TEST(ParseRequest, AGoodRequest) {
  const auto r = parse_request(
      R"({"model":"stories260K","prompt":"Once upon a time","max_tokens":5,"temperature":0,"top_k":3,"top_p":0.5,)"
      R"("seed":7,"stop":["\n"],"stream":true,"squeezekv":{"method":"squeeze","budget":16,"strength":0.5}})",
      false, limits(), stories().tokenizer());
  EXPECT_EQ(r.tokens, stories().tokenizer().encode("Once upon a time", true));
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.sampler.temperature, 0.0f);
  EXPECT_EQ(r.sampler.top_k, 3);
  EXPECT_EQ(r.sampler.seed, 7u);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.cache.method, "squeeze");
  EXPECT_EQ(r.cache.budget, 16);
  EXPECT_EQ(r.cache.get_real("strength"), 0.5);
}

TEST(ParseRequest, ChatUsesThePlainFallbackOnStories) {
  const auto r =
      parse_request(R"({"messages":[{"role":"user","content":"Hi"}]})", true, limits(), stories().tokenizer());
  EXPECT_EQ(r.prompt, "user: Hi\nassistant:");
  EXPECT_EQ(r.tokens, stories().tokenizer().encode("user: Hi\nassistant:", true));
}

struct Bad {
  const char* body;
  bool chat;
  int status;
  const char* param;
};

TEST(ParseRequest, AFieldOf400DigitsIsOneField) {
  const std::string body = R"({"prompt":"a","max_tokens":)" + std::string(400, '9') + "}";
  try {
    parse_request(body, false, limits(), stories().tokenizer());
    ADD_FAILURE() << "accepted";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "max_tokens");
  }
}

TEST(JsonErrorPlace, NamesTheFieldWhereParsingStopped) {
  EXPECT_EQ(json_error_place(R"({"a":{"b":[1,2,{"c":tru)").field, "a.b[2].c");
  EXPECT_EQ(json_error_place(R"({"a":[1,2,x)").field, "a[2]");
  EXPECT_EQ(json_error_place(R"({"a":1,"b":)").field, "b");
  const JsonErrorPlace key = json_error_place("{\"a\":{\"k\xff\":1}}");
  EXPECT_EQ(key.field, "a");
  EXPECT_TRUE(key.in_key);
  EXPECT_EQ(json_error_place("[").field, "[0]");
  EXPECT_EQ(json_error_place("nope").field, "");
}

TEST(ParseRequest, EveryBadInputNamesItsField) {
  const std::string long_prompt(2000, 'a');
  const std::string too_long = R"({"prompt":")" + long_prompt + R"("})";
  const Bad cases[] = {
      {"{not json", false, 400, ""},
      {"[1,2]", false, 400, ""},
      {R"({"max_tokens":5})", false, 400, "prompt"},
      {R"({"prompt":5})", false, 400, "prompt"},
      {R"({"prompt":"a","max_tokens":"5"})", false, 400, "max_tokens"},
      {R"({"prompt":"a","max_tokens":-3})", false, 400, "max_tokens"},
      {R"({"prompt":"a","max_tokens":1e30})", false, 400, "max_tokens"},
      {R"({"prompt":"a","max_tokens":99999999999999999999})", false, 400, "max_tokens"},
      {R"({"prompt":"a","max_tokens":1001})", false, 400, "max_tokens"},
      {R"({"prompt":"a","max_tokens":600})", false, 400, "max_tokens"},  // full cache: past -c 512
      {R"({"prompt":"a","temperature":"hot"})", false, 400, "temperature"},
      {R"({"prompt":"a","temperature":-1})", false, 400, "temperature"},
      {R"({"prompt":"a","top_p":0})", false, 400, "top_p"},
      {R"({"prompt":"a","stream":1})", false, 400, "stream"},
      {R"({"prompt":"a","cache_prompt":"yes"})", false, 400, "cache_prompt"},
      {R"({"prompt":"a","stop":[1]})", false, 400, "stop"},
      {R"({"prompt":"a","stop":["a","b","c","d","e"]})", false, 400, "stop"},
      {R"({"prompt":"a","colour":"red"})", false, 400, "colour"},
      {R"({"prompt":"a","n":2})", false, 400, "n"},
      {R"({"prompt":"a","model":"gpt-4"})", false, 404, "model"},
      {R"({"prompt":"a","squeezekv":{"method":"nope"}})", false, 400, "squeezekv.method"},
      {R"({"prompt":"a","squeezekv":{"budget":-4}})", false, 400, "squeezekv.budget"},
      {R"({"prompt":"a","squeezekv":{"budget":"many"}})", false, 400, "squeezekv.budget"},
      {R"({"prompt":"a","squeezekv":{"wibble":1}})", false, 400, "squeezekv.wibble"},
      {R"({"prompt":"a","squeezekv":{"head_dim":64}})", false, 400, "squeezekv.head_dim"},
      {R"({"prompt":"a","squeezekv":[1]})", false, 400, "squeezekv"},
      {too_long.c_str(), false, 400, "prompt"},
      {R"({"messages":[]})", true, 400, "messages"},
      {R"({"messages":[{"role":"robot","content":"x"}]})", true, 400, "messages[0].role"},
      {R"({"messages":[{"role":"user"}]})", true, 400, "messages[0].content"},
      {R"({"messages":[{"role":"user","content":"x","mood":1}]})", true, 400, "messages[0].mood"},
      {R"({"prompt":"a"})", true, 400, "prompt"},
      // Bytes that are not UTF-8, wherever they are: a 400 naming the field (the message quoting
      // them failed to serialise: a 500).
      {"{\"prompt\":\"a\xff\"}", false, 400, "prompt"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\"}]}", true, 400, "messages[0].content"},
      {"{\"prompt\":\"a\",\"stop\":[\"x\",\"\xfe\"]}", false, 400, "stop[1]"},
      {"{\"prompt\":\"a\",\"user\":\"\xed\xa0\x80\"}", false, 400, "user"},
      {"{\"prompt\":\"a\",\"model\":\"\x80\"}", false, 400, "model"},
      {"{\"prompt\":\"a\",\"squeezekv\":{\"bu\xff"
       "dget\":1}}",
       false, 400, "squeezekv"},
      // Numbers beyond a double: a 400 naming the field, not a 500.
      {R"({"prompt":"a","temperature":1e999})", false, 400, "temperature"},
      {R"({"prompt":"a","squeezekv":{"budget":-1e400}})", false, 400, "squeezekv.budget"},
      // Combinations OpenAI refuses, or that would silently drop one of the two.
      {R"({"prompt":"a","stream_options":{"include_usage":true}})", false, 400, "stream_options"},
      {R"({"prompt":"a","stream":false,"stream_options":{"include_usage":true}})", false, 400, "stream_options"},
      {R"({"prompt":"a","max_tokens":5,"max_completion_tokens":6})", false, 400, "max_completion_tokens"},
      // KIVI that would compress nothing under eviction (the default residual 128 > budget / 2).
      {R"({"prompt":"a","squeezekv":{"method":"h2o","budget":64,"kv_type":"kivi2"}})", false, 400,
       "squeezekv.kivi_residual"},
      {R"({"prompt":"a","squeezekv":{"method":"h2o","budget":16,"kv_type":"kivi2","kivi_residual":0}})", false, 400,
       "squeezekv.kivi_group"},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.body);
    try {
      parse_request(c.body, c.chat, limits(), stories().tokenizer());
      ADD_FAILURE() << "accepted";
    } catch (const RequestError& e) {
      EXPECT_EQ(e.status, c.status);
      EXPECT_EQ(e.param, c.param) << e.what();
      EXPECT_FALSE(std::string(e.what()).empty());
    }
  }
}

// The prompt of the promise tests: 48 tokens.
std::vector<int32_t> story_tokens() {
  return stories().tokenizer().encode(
      "Once upon a time there was a little girl named Lily. She loved to play outside in the park with her "
      "friends. One day she saw a big red ball under a tree and ran to get it.",
      true);
}

struct Held {
  size_t most = 0;     // the most K/V bytes resident after any update
  size_t promise = 0;  // what admission promised for the session
};

// A session as the scheduler runs it: the prompt in chunks, then greedy decoding to max_tokens,
// the cache's resident bytes taken after every update.
Held run_session(Engine& engine, const KVCacheConfig& config, const std::vector<int32_t>& text, int max_tokens,
                 int chunk) {
  auto cache = engine.make_cache(config);
  Held held;
  held.promise = promised_kv_bytes(cache->config(), stories().config(), {int64_t(text.size()), max_tokens, chunk});
  if (auto* coordinator = cache->coordinator()) coordinator->set_max_rows(int(text.size()) + max_tokens);
  std::vector<float> logits;
  engine.begin_prompt(*cache);
  for (size_t i = 0; i < text.size(); i += size_t(chunk)) {
    const size_t n = std::min(text.size() - i, size_t(chunk));
    engine.forward(std::span(text).subspan(i, n), *cache, Logits::last, logits);
    held.most = std::max(held.most, cache->kept_bytes());
  }
  engine.end_prompt(*cache);
  for (int t = 1; t < max_tokens; ++t) {
    const auto token = int32_t(argmax(logits.data(), stories().config().vocab));
    engine.forward(std::span(&token, 1), *cache, Logits::last, logits);
    held.most = std::max(held.most, cache->kept_bytes());
  }
  return held;
}

// The promise against what each method really holds, at every step of a chunked prompt and a
// long generation (past eviction), for chunk sizes around the budget.
TEST(Admission, ThePromiseBoundsWhatTheCacheHolds) {
  Engine engine(stories(), nullptr);
  const auto text = story_tokens();
  for (const MethodInfo& m : all_methods()) {
    for (const int chunk : {1, 7, 64}) {
      SCOPED_TRACE(std::string(m.id) + " chunk " + std::to_string(chunk));
      KVCacheConfig c;
      c.method = std::string(m.id);
      c.budget = 40;  // above snapkv's window; the prompt (48 tokens) is longer
      c.score = ScoreSource::attention;
      const int max_tokens = 100;
      const Held held = run_session(engine, c, text, max_tokens, chunk);
      EXPECT_LE(held.most, held.promise);
      EXPECT_GT(held.most, 0u);
    }
  }
}

// The same for every storage format (KIVI with its residual, open groups and the dead rows of its
// groups: the promise of a KIVI cache used to count its codes alone), every method, a prompt in
// one chunk and token by token.
TEST(Admission, ThePromiseBoundsEveryStorageFormat) {
  Engine engine(stories(), nullptr);
  const auto text = story_tokens();
  struct Storage {
    const char* kv_type;
    int group, residual;
    const char* k_type = nullptr;
    const char* v_type = nullptr;
  };
  const Storage storages[] = {{"f32", 32, 128},        {"q8_0", 32, 128},
                              {"q4_0", 32, 128},       {"kivi2", 32, 128},
                              {"kivi4", 8, 16},        {"kivi2", 1024, 1024},
                              {"kivi2", 64, 64},       {"kivi4", 8, 0},
                              {"f16", 8, 16, "kivi2"}, {"f16", 8, 16, nullptr, "kivi4"}};
  int checked = 0;
  for (const Storage& st : storages) {
    for (const MethodInfo& m : all_methods()) {
      KVCacheConfig c;
      c.method = std::string(m.id);
      c.budget = 40;
      c.score = ScoreSource::attention;
      c.head_dim = stories().config().head_dim;
      c.set("kv_type", st.kv_type);
      if (st.k_type) c.set("k_type", st.k_type);
      if (st.v_type) c.set("v_type", st.v_type);
      c.set("kivi_group", int64_t(st.group));
      c.set("kivi_residual", int64_t(st.residual));
      try {
        c.validate();
      } catch (const Error&) {
        continue;  // e.g. method kivi with q8_0
      }
      for (const int chunk : {1, 64}) {
        SCOPED_TRACE(std::string(m.id) + " " + st.kv_type + " group " + std::to_string(st.group) + " residual " +
                     std::to_string(st.residual) + " chunk " + std::to_string(chunk));
        const int max_tokens = 60;  // past eviction and KIVI's regrouping, in seconds under ASan
        const Held held = run_session(engine, c, text, max_tokens, chunk);
        EXPECT_LE(held.most, held.promise);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 150);
}

// A model with sliding layers (the caches built directly, random keys): the promise bounds what
// each method holds in every storage format, though the windows exceed the budget.
TEST(Admission, ThePromiseBoundsAModelWithSlidingLayers) {
  ModelConfig model;
  model.n_layers = 6;
  model.n_kv_heads = 2;
  model.head_dim = 32;
  const std::vector<LayerKind> kinds = periodic_layer_kinds(6, 50, 3);  // layers 2 and 5 global
  const char* kTypes[] = {"f16", "q4_0", "kivi2", "kivi4"};
  const int prompt = 90, max_tokens = 80;
  int checked = 0;
  for (const char* kv_type : kTypes) {
    for (const MethodInfo& m : all_methods()) {
      KVCacheConfig c;
      c.method = std::string(m.id);
      c.budget = 24;  // below the window
      c.head_dim = model.head_dim;
      c.set("kv_type", kv_type);
      c.kivi_group = 8;
      c.kivi_residual = 8;
      try {
        c.validate();
      } catch (const Error&) {
        continue;
      }
      for (const int chunk : {1, 32}) {
        SCOPED_TRACE(std::string(m.id) + " " + kv_type + " chunk " + std::to_string(chunk));
        ModelCache cache(c, model.n_layers, model.n_kv_heads, 1, kinds);
        if (auto* coordinator = cache.coordinator()) coordinator->set_max_rows(prompt + max_tokens);
        const size_t promise = promised_kv_bytes(c, model, {prompt, max_tokens, chunk}, kinds);
        size_t most = 0;
        auto feed = [&](int n, uint64_t seed) {
          for (int l = 0; l < model.n_layers; ++l) {
            const std::vector<float> k =
                test::normal(size_t(model.n_kv_heads * n * model.head_dim), seed + uint64_t(l));
            cache.layer(l).update(k.data(), k.data(), n);
          }
          most = std::max(most, cache.kept_bytes());
        };
        cache.begin_prompt();
        for (int i = 0; i < prompt; i += chunk) feed(std::min(chunk, prompt - i), uint64_t(i) * 31);
        cache.end_prompt();
        for (int t = 1; t < max_tokens; ++t) feed(1, 100000 + uint64_t(t) * 31);
        EXPECT_LE(most, promise);
        EXPECT_GT(cache.sliding_kept_bytes(), 0u);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 40);
}

// Gemma 3 270M's shape (18 layers, 1 KV head of 256, window 512, every 6th layer global): a full
// cache promises the window in its 15 sliding layers and the whole context in its 3 global ones.
TEST(Admission, AFullCacheOfGemma3PromisesWhatLlamaCppHolds) {
  ModelConfig gemma;
  gemma.n_layers = 18;
  gemma.n_kv_heads = 1;
  gemma.head_dim = 256;
  const std::vector<LayerKind> kinds = periodic_layer_kinds(18, 512, 6);
  KVCacheConfig full;
  full.method = "full";
  const SessionShape shape{512, 4096 - 512, 64};
  const size_t row = 256 * 2 * 2;  // K and V, fp16
  EXPECT_EQ(promised_kv_bytes(full, gemma, shape, kinds), (15 * (512 + 1 + 64) + 3 * (4096 + 512)) * row);
  KVCacheConfig squeeze;
  squeeze.method = "squeeze";
  squeeze.budget = 256;  // the average over the 3 global layers
  EXPECT_EQ(promised_kv_bytes(squeeze, gemma, shape, kinds), (15 * (512 + 1 + 64) + 3 * (256 + 1 + 64)) * row);
  EXPECT_THROW(promised_kv_bytes(full, gemma, shape, std::vector<LayerKind>(3)), InvalidArgument);
}

TEST(Admission, SqueezeAt256FitsOver8TimesTheSessionsOfAFullCacheAt4096) {
  ModelConfig llama1b;  // Llama-3.2-1B's attention shape
  llama1b.n_layers = 16;
  llama1b.n_kv_heads = 8;
  llama1b.head_dim = 64;
  KVCacheConfig full, squeeze;
  full.method = "full";
  squeeze.method = "squeeze";
  squeeze.budget = 256;
  // A full cache for a 4096-token context; squeeze for the same request (a 64-token chunk).
  const SessionShape shape{512, 4096 - 512, 64};
  const size_t full_bytes = promised_kv_bytes(full, llama1b, shape);
  const size_t squeeze_bytes = promised_kv_bytes(squeeze, llama1b, shape);
  // 16 layers x 8 heads x 64 x 2 x 2 bytes = 32 KiB per row of every head: the full cache
  // promises 4096 + 512 rows (growth slack), squeeze 256 + 1 + 64.
  EXPECT_EQ(full_bytes, size_t(4096 + 512) * 32768);
  EXPECT_EQ(squeeze_bytes, size_t(256 + 1 + 64) * 32768);
  const size_t limit = size_t(1) << 30;
  EXPECT_GE(limit / squeeze_bytes, 8 * (limit / full_bytes));
}

}  // namespace
}  // namespace squeezekv::serve
