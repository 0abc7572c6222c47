// Text generation with any cache configuration: prefill the prompt in chunks (prefill.h), then
// decode.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "squeezekv/engine/engine.h"
#include "squeezekv/engine/sampler.h"

namespace squeezekv {

struct GenerateOptions {
  int n_predict = 128;  // tokens to generate (stops early at EOS)
  int n_batch = 512;    // prompt tokens per prefill update
  // A full cache only: 0 = the model's context length; prompt + output must fit. An evicting
  // cache holds a bounded number of rows whatever the length, so it takes any length.
  int n_ctx = 0;
  SamplerOptions sampler;
  bool ignore_eos = false;            // keep generating past EOS (long streams)
  std::optional<int32_t> stop_token;  // also ends generation, as EOS does (a chat's end of turn)
  bool keep_tokens = true;            // false: result.tokens stays empty, memory stays constant
  int64_t speed_window = 10000;       // tokens timed at the start and the end of the output
  // Asked after the prompt has ended: the cache chooses its rows from the prompt alone (a document
  // read once, its question later: query-agnostic), then these tokens go in as a chunk of their own.
  std::vector<int32_t> question;
  // Continue the cache where it stands (a loaded cache file, engine/cache_file.h): the prompt is
  // the text that follows what it has seen. False: the cache is cleared first.
  bool continue_cache = false;
  // Feed the last generated token too, so that the cache has seen the whole output (before it is
  // saved); by default the last token is sampled and never fed.
  bool feed_last = false;
  // Called once the prompt is in the cache, before the first token is sampled (to save it).
  std::function<void()> after_prompt;
};

struct GenerateResult {
  std::vector<int32_t> prompt_tokens;
  int64_t question_tokens = 0;  // GenerateOptions::question's, fed after the prompt (in prompt_seconds)
  std::vector<int32_t> tokens;  // generated (empty unless keep_tokens)
  int64_t n_generated = 0;
  int64_t n_fed = 0;  // generated tokens the cache has seen (all but the last, unless feed_last)
  double prompt_seconds = 0.0, decode_seconds = 0.0;
  // Decode seconds of the first and of the last speed_window generated tokens (0 when fewer
  // than 2 * speed_window were generated): constant speed over a stream.
  double first_window_seconds = 0.0, last_window_seconds = 0.0;
  double prompt_tokens_per_second() const;
  double decode_tokens_per_second() const;
  bool stopped_at_eos = false;
};

// InvalidArgument naming the prompt unless a full cache fed n_prompt tokens, then n_predict more,
// stays within n_ctx tokens (an evicting cache takes any length). generate, needle and the
// commands over them check with this one rule.
void require_fits_context(const KVCacheConfig& config, int64_t n_prompt, int64_t n_predict, int64_t n_ctx);

// on_token is called with each generated token as soon as it is sampled (streaming). The prompt
// is encoded with the model's special tokens (BOS where it asks for one).
GenerateResult generate(Engine& engine, ModelCache& cache, const std::string& prompt, const GenerateOptions& options,
                        const std::function<void(int32_t)>& on_token = {});
// The same from prompt tokens (a chat rendered by chat_template.h, say).
GenerateResult generate(Engine& engine, ModelCache& cache, std::vector<int32_t> prompt_tokens,
                        const GenerateOptions& options, const std::function<void(int32_t)>& on_token = {});

// Share of 4-grams of `tokens` that repeat an earlier 4-gram (0 when fewer than 5 tokens):
// importance eviction without a recent window is known to collapse into repetition.
double repeated_ngram_share(const std::vector<int32_t>& tokens, int n = 4);

}  // namespace squeezekv
