#include "squeezekv/engine/generate.h"

#include <chrono>
#include <set>

#include "squeezekv/base/errors.h"
#include "squeezekv/engine/prefill.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv {

double GenerateResult::prompt_tokens_per_second() const {
  return prompt_seconds > 0 ? double(int64_t(prompt_tokens.size()) + question_tokens) / prompt_seconds : 0.0;
}

double GenerateResult::decode_tokens_per_second() const {
  return decode_seconds > 0 ? double(n_generated) / decode_seconds : 0.0;
}

void require_fits_context(const KVCacheConfig& config, int64_t n_prompt, int64_t n_predict, int64_t n_ctx) {
  if (!keeps_every_row(config)) return;
  require(n_prompt + n_predict <= n_ctx, "prompt", std::to_string(n_prompt) + " tokens",
          "prompt plus n_predict = " + std::to_string(n_predict) + " exceeds the context of " + std::to_string(n_ctx) +
              " tokens of a full cache (raise n_ctx, or use an evicting method)");
}

GenerateResult generate(Engine& engine, ModelCache& cache, const std::string& prompt, const GenerateOptions& options,
                        const std::function<void(int32_t)>& on_token) {
  return generate(engine, cache, engine.model().tokenizer().encode(prompt, true), options, on_token);
}

GenerateResult generate(Engine& engine, ModelCache& cache, std::vector<int32_t> prompt_tokens,
                        const GenerateOptions& options, const std::function<void(int32_t)>& on_token) {
  using Clock = std::chrono::steady_clock;
  const Model& model = engine.model();
  require(options.n_predict >= 0, "n_predict", options.n_predict, "must be >= 0");
  require(options.n_batch >= 1, "n_batch", options.n_batch, "must be >= 1");
  require(options.n_ctx >= 0, "n_ctx", options.n_ctx, "must be >= 0 (0 = the model's context)");
  const int n_ctx = options.n_ctx > 0 ? options.n_ctx : model.config().context_length;
  GenerateResult result;
  result.prompt_tokens = std::move(prompt_tokens);
  result.question_tokens = int64_t(options.question.size());
  const auto n_prompt = int64_t(result.prompt_tokens.size()) + result.question_tokens;
  require(n_prompt >= 1, "prompt", "\"\"", "the prompt encodes to no token");
  const int64_t history = options.continue_cache ? cache.layer(0).tokens_seen() : 0;
  require_fits_context(cache.config(), history + n_prompt, options.n_predict, n_ctx);
  Sampler sampler(options.sampler);
  std::vector<float> logits;
  auto start = Clock::now();
  PrefillOptions prefill_options;
  prefill_options.n_batch = options.n_batch;
  prefill_options.max_rows = history + n_prompt + options.n_predict;
  prefill_options.reset = !options.continue_cache;
  prefill(engine, cache, result.prompt_tokens, prefill_options, logits);
  if (!options.question.empty()) {  // after the prompt's own eviction, as a chunk of its own
    prefill_options.reset = false;
    prefill_options.as_prompt = false;
    prefill(engine, cache, options.question, prefill_options, logits);
  }
  result.prompt_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (options.after_prompt) options.after_prompt();
  start = Clock::now();
  const int64_t window = options.speed_window;
  const bool timed = window > 0 && options.n_predict >= 2 * window;
  Clock::time_point last_from{};
  for (int64_t i = 0; i < options.n_predict; ++i) {
    if (timed && i == window) result.first_window_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (timed && i == options.n_predict - window) last_from = Clock::now();
    const int32_t token = sampler.sample(logits.data(), model.config().vocab);
    const bool ends = model.tokenizer().is_end_of_generation(token) || options.stop_token == token;
    if (ends && !options.ignore_eos) {
      result.stopped_at_eos = true;
      break;
    }
    if (options.keep_tokens) result.tokens.push_back(token);
    ++result.n_generated;
    if (on_token) on_token(token);
    if (i + 1 < options.n_predict || options.feed_last) {
      engine.forward(std::span(&token, 1), cache, Logits::last, logits);
      ++result.n_fed;
    }
  }
  const auto end = Clock::now();
  result.decode_seconds = std::chrono::duration<double>(end - start).count();
  if (timed && !result.stopped_at_eos) {
    result.last_window_seconds = std::chrono::duration<double>(end - last_from).count();
  } else {
    result.first_window_seconds = 0.0;
  }
  return result;
}

double repeated_ngram_share(const std::vector<int32_t>& tokens, int n) {
  if (int(tokens.size()) < n + 1) return 0.0;
  std::set<std::vector<int32_t>> seen;
  int repeated = 0, total = 0;
  for (size_t i = 0; i + size_t(n) <= tokens.size(); ++i) {
    std::vector<int32_t> gram(tokens.begin() + long(i), tokens.begin() + long(i) + n);
    repeated += !seen.insert(std::move(gram)).second;
    ++total;
  }
  return double(repeated) / double(total);
}

}  // namespace squeezekv
