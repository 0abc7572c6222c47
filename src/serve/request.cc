#include "serve/request.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "serve/json_error.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv::serve {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw RequestError(Failure::invalid_field, param, message);
}

std::string type_of(const json& v) { return v.type_name(); }

// An integer field in [lo, hi]; floats with a fraction, strings and booleans are wrong types.
int64_t get_int(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  if (!v.is_number_integer() && !v.is_number_unsigned()) {
    bad(name, "'" + name + "' must be an integer, not " + type_of(v));
  }
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
    bad(name, "'" + name + "' must be at most " + std::to_string(hi));
  }
  const auto x = v.get<int64_t>();
  if (x < lo || x > hi) {
    bad(name, "'" + name + "' must lie in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                  std::to_string(x));
  }
  return x;
}

double get_number(const json& v, const std::string& name, double lo, double hi) {
  if (!v.is_number()) bad(name, "'" + name + "' must be a number, not " + type_of(v));
  const auto x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    bad(name, "'" + name + "' must lie in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v.dump());
  }
  return x;
}

std::string get_string(const json& v, const std::string& name) {
  if (!v.is_string()) bad(name, "'" + name + "' must be a string, not " + type_of(v));
  return v.get<std::string>();
}

// The text of a message's content: a string, or OpenAI's list of {"type": "text", "text": ...} parts.
std::string content_text(const json& v, const std::string& name) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) bad(name, "'" + name + "' must be a string or a list of text parts, not " + type_of(v));
  std::string out;
  for (const json& part : v) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string()) {
      bad(name, "'" + name + "' parts must be {\"type\": \"text\", \"text\": STRING}");
    }
    out += part["text"].get<std::string>();
  }
  return out;
}

std::vector<ChatMessage> parse_messages(const json& v) {
  if (!v.is_array() || v.empty()) bad("messages", "'messages' must be a non-empty list");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    const json& m = v[i];
    if (!m.is_object()) bad(at, "'" + at + "' must be an object");
    for (const auto& [key, value] : m.items()) {
      if (key != "role" && key != "content" && key != "name")
        bad(at + "." + key, "unknown field '" + at + "." + key + "'");
    }
    if (!m.contains("role")) bad(at + ".role", "'" + at + ".role' is required");
    const std::string role = get_string(m["role"], at + ".role");
    static const std::set<std::string, std::less<>> roles = {"system", "user", "assistant", "developer"};
    if (!roles.contains(role))
      bad(at + ".role", "'" + at + ".role' must be system, user, assistant or developer, not '" + role + "'");
    if (!m.contains("content")) bad(at + ".content", "'" + at + ".content' is required");
    out.push_back({role == "developer" ? "system" : role, content_text(m["content"], at + ".content")});
  }
  return out;
}

// The "squeezekv" extra field: cache parameters by name, applied over the server's default.
KVCacheConfig parse_cache(const json& v, KVCacheConfig config) {
  if (!v.is_object()) bad("squeezekv", "'squeezekv' must be an object of cache parameters");
  for (const auto& [key, value] : v.items()) {
    const std::string name = "squeezekv." + key;
    if (find_param(key) == nullptr) bad(name, "unknown cache parameter '" + key + "' (see `squeezekv methods`)");
    if (key == "head_dim") bad(name, "'" + name + "' is the model's and cannot be chosen");
    try {
      if (value.is_string()) {
        config.set(key, value.get<std::string>());
      } else if (value.is_number_integer() || value.is_number_unsigned()) {
        config.set(key, std::to_string(value.get<int64_t>()));
      } else if (value.is_number_float()) {
        config.set(key, value.dump());
      } else {
        bad(name, "'" + name + "' must be a string or a number, not " + type_of(value));
      }
    } catch (const Error& e) {
      bad(name, std::string("'") + name + "': " + e.what());
    }
  }
  try {
    config.validate();  // a storage that compresses nothing included (storage_budget_unfit)
  } catch (const Error& e) {
    // Messages read "name = value: why" (errors.h): the field is the name.
    const std::string what = e.what();
    const size_t eq = what.find(" = ");
    bad(eq == std::string::npos ? "squeezekv" : "squeezekv." + what.substr(0, eq), "invalid cache: " + what);
  }
  return config;
}

}  // namespace

CompletionRequest parse_request(const std::string& body, bool chat, const RequestLimits& limits,
                                const Tokenizer& tokenizer, FragmentMemo* memo) {
  json j = parse_body(body);
  if (!j.is_object()) bad("", "the body must be a JSON object");
  CompletionRequest r;
  r.chat = chat;
  r.cache = limits.cache;
  r.max_tokens = chat ? 128 : 16;  // OpenAI's completions default; chat: a bounded one
  // Fields accepted but without effect here, when they ask for nothing (their defaults).
  static const std::set<std::string, std::less<>> inert = {
      "user",           "n",      "presence_penalty", "frequency_penalty", "logprobs", "echo", "best_of", "logit_bias",
      "stream_options", "suffix", "top_logprobs"};
  static const std::set<std::string, std::less<>> known = {
      "model",     "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stream",
      "squeezekv", "ignore_eos", "cache_prompt"};
  for (const auto& [key, value] : j.items()) {
    if (key == (chat ? "messages" : "prompt")) continue;
    if (!known.contains(key) && !inert.contains(key)) bad(key, "unknown field '" + key + "'");
    if (!inert.contains(key) || value.is_null()) continue;
    if (key == "n" || key == "best_of") {
      if (get_int(value, key, 1, 1) != 1) bad(key, "'" + key + "' must be 1");
    } else if (key == "presence_penalty" || key == "frequency_penalty") {
      if (get_number(value, key, 0, 0) != 0) bad(key, "'" + key + "' is not supported (only 0)");
    } else if (key == "logprobs" || key == "echo") {
      if (!value.is_boolean() || value.get<bool>()) bad(key, "'" + key + "' is not supported (only false)");
    } else if (key == "stream_options") {
      if (!value.is_object()) bad(key, "'stream_options' must be an object");
      for (const auto& [k, x] : value.items()) {
        if (k != "include_usage") bad("stream_options." + k, "unknown field 'stream_options." + k + "'");
        if (!x.is_boolean()) bad("stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
        r.include_usage = x.get<bool>();
      }
    } else if (key == "logit_bias") {
      if (!value.is_object() || !value.empty()) bad(key, "'logit_bias' is not supported (only {})");
    } else if (key == "user") {
      get_string(value, key);
    } else {
      bad(key, "'" + key + "' is not supported");
    }
  }
  if (j.contains("model") && !j["model"].is_null()) {
    const std::string model = get_string(j["model"], "model");
    if (model != limits.model_id) {
      throw RequestError(Failure::unknown_model, "model",
                         "the model '" + model + "' does not exist (this server has '" + limits.model_id + "')");
    }
  }
  const auto given = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  if (given("max_tokens") && given("max_completion_tokens")) {
    bad("max_completion_tokens", "give 'max_tokens' or 'max_completion_tokens', not both");
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (given(key)) r.max_tokens = int(get_int(j[key], key, 1, limits.max_tokens));
  }
  if (j.contains("temperature") && !j["temperature"].is_null()) {
    r.sampler.temperature = float(get_number(j["temperature"], "temperature", 0.0, 2.0));
  }
  if (j.contains("top_p") && !j["top_p"].is_null()) {
    r.sampler.top_p = float(get_number(j["top_p"], "top_p", 0.0, 1.0));
    if (r.sampler.top_p <= 0.0f) bad("top_p", "'top_p' must lie in (0, 1]");
  }
  if (j.contains("top_k") && !j["top_k"].is_null()) r.sampler.top_k = int(get_int(j["top_k"], "top_k", 0, 1 << 20));
  if (j.contains("seed") && !j["seed"].is_null()) {
    r.sampler.seed =
        uint64_t(get_int(j["seed"], "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
  }
  const auto read_bool = [&](const char* key, bool& out) {
    if (!given(key)) return;
    if (!j[key].is_boolean()) bad(key, std::string("'") + key + "' must be a boolean");
    out = j[key].get<bool>();
  };
  read_bool("stream", r.stream);
  if (given("stream_options") && !r.stream) {
    bad("stream_options", "'stream_options' is only allowed when 'stream' is true");  // as OpenAI answers
  }
  read_bool("cache_prompt", r.cache_prompt);
  read_bool("ignore_eos", r.ignore_eos);
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& s = j["stop"];
    if (s.is_string()) {
      r.stop.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 4) {
      for (const json& x : s) r.stop.push_back(get_string(x, "stop"));
    } else {
      bad("stop", "'stop' must be a string or a list of at most 4 strings");
    }
    for (const std::string& x : r.stop) {
      if (x.empty()) bad("stop", "'stop' strings must not be empty");
    }
  }
  if (j.contains("squeezekv") && !j["squeezekv"].is_null()) r.cache = parse_cache(j["squeezekv"], limits.cache);

  if (chat) {
    if (!j.contains("messages")) bad("messages", "'messages' is required");
    const auto messages = parse_messages(j["messages"]);
    r.prompt = render_chat(limits.chat, messages);
    r.tokens = encode_chat(tokenizer, limits.chat.format, r.prompt, memo);
    r.stop_token = end_of_turn(tokenizer, limits.chat.format);
  } else {
    if (!j.contains("prompt")) bad("prompt", "'prompt' is required");
    const json& p = j["prompt"];
    if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      r.prompt = p[0].get<std::string>();  // a list of one prompt, as some clients send
    } else {
      r.prompt = get_string(p, "prompt");
    }
    if (r.prompt.empty()) bad("prompt", "'prompt' must not be empty");
    r.tokens = tokenizer.encode(r.prompt, true);
  }
  const auto n_prompt = int64_t(r.tokens.size());
  if (n_prompt > limits.max_prompt_tokens) {
    throw RequestError(Failure::prompt_too_long, chat ? "messages" : "prompt",
                       "the prompt has " + std::to_string(n_prompt) + " tokens, more than the " +
                           std::to_string(limits.max_prompt_tokens) + " this server allows");
  }
  if (keeps_every_row(r.cache) && n_prompt + r.max_tokens > limits.n_ctx) {
    bad("max_tokens", "prompt (" + std::to_string(n_prompt) + " tokens) plus max_tokens (" +
                          std::to_string(r.max_tokens) + ") exceeds the full cache's context of " +
                          std::to_string(limits.n_ctx) + " tokens (lower max_tokens, or choose an evicting cache)");
  }
  return r;
}

}  // namespace squeezekv::serve
