#include "squeezekv/engine/generate.h"

#include <chrono>
#include <set>

#include "squeezekv/base/errors.h"

namespace squeezekv {

double GenerateResult::prompt_tokens_per_second() const {
  return prompt_seconds > 0 ? double(prompt_tokens.size()) / prompt_seconds : 0.0;
}

double GenerateResult::decode_tokens_per_second() const {
  return decode_seconds > 0 ? double(tokens.size()) / decode_seconds : 0.0;
}

GenerateResult generate(Engine& engine, ModelCache& cache, const std::string& prompt,
                        const GenerateOptions& options, const std::function<void(int32_t)>& on_token) {
  const Model& model = engine.model();
  require(options.n_predict >= 0, "n_predict", options.n_predict, "must be >= 0");
  require(options.n_batch >= 1, "n_batch", options.n_batch, "must be >= 1");
  const int n_ctx = options.n_ctx > 0 ? options.n_ctx : model.config().context_length;
  GenerateResult result;
  result.prompt_tokens = model.tokenizer().encode(prompt, true);
  const auto n_prompt = int(result.prompt_tokens.size());
  require(n_prompt >= 1, "prompt", "\"\"", "the prompt encodes to no token");
  require(n_prompt + options.n_predict <= n_ctx, "prompt", std::to_string(n_prompt) + " tokens",
          "prompt plus --n-predict " + std::to_string(options.n_predict) + " exceeds the context of " +
              std::to_string(n_ctx) + " tokens (raise -c)");
  Sampler sampler(options.sampler);
  std::vector<float> logits;
  cache.reset();
  if (BudgetCoordinator* coordinator = cache.coordinator()) coordinator->set_max_rows(n_prompt + options.n_predict);
  engine.begin_prompt(cache);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n_prompt; i += options.n_batch) {
    const int n = std::min(options.n_batch, n_prompt - i);
    engine.forward(std::span(result.prompt_tokens).subspan(size_t(i), size_t(n)), cache,
                   i + n == n_prompt ? Logits::last : Logits::none, logits);
  }
  engine.end_prompt(cache);
  result.prompt_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  start = std::chrono::steady_clock::now();
  const auto eos = model.tokenizer().eos();
  for (int i = 0; i < options.n_predict; ++i) {
    const int32_t token = sampler.sample(logits.data(), model.config().vocab);
    if (eos && token == *eos) {
      result.stopped_at_eos = true;
      break;
    }
    result.tokens.push_back(token);
    if (on_token) on_token(token);
    if (i + 1 < options.n_predict) engine.forward(std::span(&token, 1), cache, Logits::last, logits);
  }
  result.decode_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
