// The engine half of the C API: loading a GGUF model, tokens, generation and perplexity.
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "capi/capi_cache.h"
#include "capi/capi_engine.h"
#include "capi/capi_status.h"
#include "squeezekv/engine/cache_file.h"
#include "squeezekv/engine/generate.h"
#include "squeezekv/eval/perplexity.h"

using squeezekv::capi::guarded;
using squeezekv::capi::guarded_count;
using squeezekv::capi::require_handle;

namespace {

std::unique_ptr<squeezekv::ThreadPool> make_pool(int32_t n_threads) {
  squeezekv::require(n_threads >= 0, "n_threads", n_threads, "must be >= 0 (0 = every core)");
  const size_t n = n_threads > 0 ? size_t(n_threads) : std::max(1u, std::thread::hardware_concurrency());
  return std::make_unique<squeezekv::ThreadPool>(n);
}

}  // namespace

extern "C" {

squeezekv_model* squeezekv_model_load(const char* path) {
  squeezekv_model* out = nullptr;
  guarded(__func__, [&] {
    squeezekv::require(path != nullptr, "path", "NULL", "a model path is required");
    out = new squeezekv_model{squeezekv::Model::load(path)};
  });
  return out;
}

void squeezekv_model_free(squeezekv_model* model) { delete model; }

squeezekv_model_info squeezekv_model_get_info(const squeezekv_model* model) {
  squeezekv_model_info info{};
  if (!model) return info;
  const squeezekv::ModelConfig& c = model->model.config();
  info.n_layers = c.n_layers;
  info.n_heads = c.n_heads;
  info.n_kv_heads = c.n_kv_heads;
  info.head_dim = c.head_dim;
  info.dim = c.dim;
  info.vocab = c.vocab;
  info.context_length = c.context_length;
  return info;
}

squeezekv_cache* squeezekv_cache_init_for_model(const squeezekv_model* model, const squeezekv_cache_params* params) {
  squeezekv_cache* out = nullptr;
  guarded(__func__, [&] {
    const squeezekv::ModelConfig& c = require_handle(model, "model").model.config();
    squeezekv::KVCacheConfig shaped = require_handle(params, "params").config;
    shaped.head_dim = c.head_dim;
    auto cache = std::make_unique<squeezekv_cache>();
    // Its sliding layers hold their windows, as Engine::make_cache builds them.
    cache->model = squeezekv::KVCacheBuilder::for_model(c.n_layers, shaped, c.n_kv_heads, 1, c.layer_kinds());
    out = cache.release();
  });
  return out;
}

int32_t squeezekv_tokenize(const squeezekv_model* model, const char* text, int32_t text_len, int32_t* tokens,
                           int32_t n_max, bool add_bos) {
  return guarded_count(__func__, [&] {
    const squeezekv::Model& m = require_handle(model, "model").model;
    squeezekv::require(text != nullptr || text_len == 0, "text", "NULL", "required");
    const size_t len = text_len < 0 ? std::strlen(text) : size_t(text_len);
    const std::vector<int32_t> ids = m.tokenizer().encode(std::string_view(text, len), add_bos);
    const auto n = int32_t(ids.size());
    if (n_max < n) return -n;
    squeezekv::require(tokens != nullptr || n == 0, "tokens", "NULL", "an output array of n_max ids is required");
    std::copy(ids.begin(), ids.end(), tokens);
    return n;
  });
}

int32_t squeezekv_detokenize(const squeezekv_model* model, const int32_t* tokens, int32_t n_tokens, char* buf,
                             int32_t buf_size) {
  return guarded_count(__func__, [&] {
    const squeezekv::Model& m = require_handle(model, "model").model;
    squeezekv::require(n_tokens >= 0, "n_tokens", n_tokens, "must be >= 0");
    squeezekv::require(tokens != nullptr || n_tokens == 0, "tokens", "NULL", "an array of n_tokens ids is required");
    const std::string text = m.tokenizer().decode(std::span<const int32_t>(tokens, size_t(n_tokens)));
    const auto n = int32_t(text.size());
    if (buf_size < n + 1) return -(n + 1);
    squeezekv::require(buf != nullptr, "buf", "NULL", "an output buffer of buf_size bytes is required");
    std::memcpy(buf, text.data(), text.size());
    buf[n] = '\0';
    return n;
  });
}

squeezekv_generate_params squeezekv_generate_default_params(void) {
  const squeezekv::GenerateOptions o;
  squeezekv_generate_params p;
  p.n_predict = o.n_predict;
  p.n_batch = o.n_batch;
  p.n_ctx = o.n_ctx;
  p.n_threads = 0;
  p.temperature = o.sampler.temperature;
  p.top_k = o.sampler.top_k;
  p.top_p = o.sampler.top_p;
  p.seed = o.sampler.seed;
  p.on_token = nullptr;
  p.user_data = nullptr;
  p.continue_cache = false;
  return p;
}

int32_t squeezekv_generate(const squeezekv_model* model, squeezekv_cache* cache, const char* prompt,
                           const squeezekv_generate_params* params, int32_t* tokens, int32_t n_max) {
  return guarded_count(__func__, [&] {
    const squeezekv::Model& m = require_handle(model, "model").model;
    const squeezekv_generate_params& p = require_handle(params, "params");
    squeezekv::require(require_handle(cache, "cache").model != nullptr, "cache", "a lone layer",
                       "generation needs a model cache (squeezekv_cache_init_for_model)");
    squeezekv::require(prompt != nullptr, "prompt", "NULL", "a prompt is required");
    if (n_max < p.n_predict) return -p.n_predict;
    squeezekv::require(tokens != nullptr || p.n_predict == 0, "tokens", "NULL",
                       "an output array of n_max ids is required");
    squeezekv::GenerateOptions options;
    options.n_predict = p.n_predict;
    options.n_batch = p.n_batch;
    options.n_ctx = p.n_ctx;
    options.sampler = {p.temperature, p.top_k, p.top_p, p.seed};
    options.continue_cache = p.continue_cache && cache->model->layer(0).tokens_seen() > 0;
    const squeezekv::Tokenizer& tokenizer = m.tokenizer();
    std::vector<int32_t> prompt_tokens = tokenizer.encode(prompt, true);
    if (options.continue_cache) {
      // The C API's caches track what they have seen: a cache filled another way cannot continue.
      squeezekv::require(int64_t(cache->tokens.size()) == cache->model->layer(0).tokens_seen(), "cache",
                         "filled by updates", "only a cache filled by squeezekv_generate or loaded continues");
      prompt_tokens = squeezekv::continuation_tokens(cache->tokens, prompt_tokens, tokenizer.encode(prompt, false));
      squeezekv::require(!prompt_tokens.empty(), "prompt", prompt,
                         "adds no token to the " + std::to_string(cache->tokens.size()) + " the cache has seen");
    } else {
      cache->tokens.clear();
    }
    auto pool = make_pool(p.n_threads);
    squeezekv::Engine engine(m, pool.get());
    std::function<void(int32_t)> on_token;
    if (p.on_token) on_token = [&p](int32_t token) { p.on_token(token, p.user_data); };
    const squeezekv::GenerateResult r = squeezekv::generate(engine, *cache->model, prompt_tokens, options, on_token);
    cache->tokens.insert(cache->tokens.end(), r.prompt_tokens.begin(), r.prompt_tokens.end());
    cache->tokens.insert(cache->tokens.end(), r.tokens.begin(), r.tokens.begin() + long(r.n_fed));
    std::copy(r.tokens.begin(), r.tokens.end(), tokens);
    return int32_t(r.tokens.size());
  });
}

squeezekv_perplexity_params squeezekv_perplexity_default_params(void) {
  const squeezekv::PerplexityOptions o;
  return squeezekv_perplexity_params{o.n_ctx, o.n_batch, o.max_chunks, 0};
}

squeezekv_status squeezekv_perplexity(const squeezekv_model* model, const int32_t* tokens, int32_t n_tokens,
                                      const squeezekv_cache_params* const* configs, int32_t n_configs,
                                      const squeezekv_perplexity_params* params, squeezekv_perplexity_result* results) {
  return guarded(__func__, [&] {
    const squeezekv::Model& m = require_handle(model, "model").model;
    const squeezekv_perplexity_params& p = require_handle(params, "params");
    squeezekv::require(n_tokens >= 0, "n_tokens", n_tokens, "must be >= 0");
    squeezekv::require(tokens != nullptr || n_tokens == 0, "tokens", "NULL", "an array of n_tokens ids is required");
    squeezekv::require(n_configs >= 1, "n_configs", n_configs, "must be >= 1");
    squeezekv::require(configs != nullptr, "configs", "NULL", "an array of n_configs parameter handles is required");
    squeezekv::require(results != nullptr, "results", "NULL", "an output array of n_configs results is required");
    std::vector<squeezekv::KVCacheConfig> list;
    for (int32_t i = 0; i < n_configs; ++i) {
      const std::string name = "configs[" + std::to_string(i) + "]";
      squeezekv::KVCacheConfig shaped = require_handle(configs[i], name.c_str()).config;
      shaped.head_dim = m.config().head_dim;
      shaped.validate();
      list.push_back(std::move(shaped));
    }
    squeezekv::PerplexityOptions options;
    options.n_ctx = p.n_ctx;
    options.n_batch = p.n_batch;
    options.max_chunks = p.max_chunks;
    auto pool = make_pool(p.n_threads);
    squeezekv::Engine engine(m, pool.get());
    const auto out =
        squeezekv::evaluate_perplexity(engine, std::span<const int32_t>(tokens, size_t(n_tokens)), list, options);
    for (size_t i = 0; i < out.size() && i < size_t(n_configs); ++i) {
      const squeezekv::PerplexityResult& r = out[i];
      results[i] = squeezekv_perplexity_result{
          r.chunks,          r.scored,          r.mean_nll,        r.perplexity,      r.mean_kl, r.top1_agreement,
          r.mean_kept_bytes, r.peak_kept_bytes, r.mean_full_bytes, r.peak_full_bytes, r.seconds};
    }
  });
}

}  // extern "C"
