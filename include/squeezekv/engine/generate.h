// Text generation with any cache configuration: prefill the prompt in chunks, then decode.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "squeezekv/engine/engine.h"
#include "squeezekv/engine/sampler.h"

namespace squeezekv {

struct GenerateOptions {
  int n_predict = 128;     // tokens to generate (stops early at EOS)
  int n_batch = 512;       // prompt tokens per prefill update
  int n_ctx = 0;           // 0 = the model's context length; prompt + output must fit
  SamplerOptions sampler;
};

struct GenerateResult {
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> tokens;  // generated
  double prompt_seconds = 0.0, decode_seconds = 0.0;
  double prompt_tokens_per_second() const;
  double decode_tokens_per_second() const;
  bool stopped_at_eos = false;
};

// on_token is called with each generated token as soon as it is sampled (streaming).
GenerateResult generate(Engine& engine, ModelCache& cache, const std::string& prompt,
                        const GenerateOptions& options,
                        const std::function<void(int32_t)>& on_token = {});

// Share of 4-grams of `tokens` that repeat an earlier 4-gram (0 when fewer than 5 tokens):
// importance eviction without a recent window is known to collapse into repetition.
double repeated_ngram_share(const std::vector<int32_t>& tokens, int n = 4);

}  // namespace squeezekv
