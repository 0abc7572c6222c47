// An OpenAI-style request body checked and turned into what the scheduler runs. Every problem is a
// RequestError naming the field, which the HTTP layer answers as a 4xx JSON error.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "serve/error_contract.h"
#include "squeezekv/engine/chat_template.h"
#include "squeezekv/methods/kv_cache_config.h"
#include "squeezekv/engine/sampler.h"

namespace squeezekv::serve {

struct RequestError : std::runtime_error {
  RequestError(Failure failure_, std::string param_, const std::string& message)
      : std::runtime_error(message),
        failure(failure_),
        status(failure_spec(failure_).status),
        param(std::move(param_)) {}
  Failure failure;
  int status;         // failure's (error_contract.h)
  std::string param;  // the offending field ("" when none)
};

// What the server allows, fixed at start.
struct RequestLimits {
  std::string model_id;       // the one model served; "model" must name it when given
  int max_tokens = 1 << 16;   // largest max_tokens accepted
  int max_prompt_tokens = 0;  // longest prompt (the context -c)
  int n_ctx = 0;              // a full cache's context: prompt + max_tokens must fit
  KVCacheConfig cache;        // the server's default cache
  ChatTemplate chat;
};

struct CompletionRequest {
  bool chat = false;
  std::string prompt;           // the text given, or the rendered chat
  std::vector<int32_t> tokens;  // the prompt's token ids
  int max_tokens = 16;
  SamplerOptions sampler;
  std::vector<std::string> stop;  // up to 4 strings; the output ends before the first one
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the counts
  bool ignore_eos = false;     // as llama.cpp's server: generate max_tokens whatever comes
  KVCacheConfig cache;
  std::optional<int32_t> stop_token;  // the chat format's end of turn, when the vocabulary has it
  // As llama-server's: continue from a kept cache whose tokens begin this prompt, and keep this
  // request's cache when it finishes (Scheduler, "kept caches").
  bool cache_prompt = true;
};

// Parses and checks a /v1/completions (chat = false) or /v1/chat/completions body, tokenizes the
// prompt and resolves the cache: the server's default with the "squeezekv" object's parameters set
// by name (KVCacheConfig::set, as the command line does) and validated. A chat's messages are
// looked up in and added to `memo` when one is given (the same tokens, less work on a long chat).
CompletionRequest parse_request(const std::string& body, bool chat, const RequestLimits& limits,
                                const Tokenizer& tokenizer, FragmentMemo* memo = nullptr);

}  // namespace squeezekv::serve
