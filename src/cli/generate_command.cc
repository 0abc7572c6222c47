// `squeezekv generate`: streams text to stdout; speed, per-layer budgets and kept rows and the
// resident KV bytes against a full cache to stderr.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/cache_file_options.h"
#include "cli/cache_options.h"
#include "cli/command_registry.h"
#include "cli/layer_kinds_note.h"
#include "cli/model_options.h"
#include "squeezekv/alloc/budget_allocator.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/base/utf8.h"
#include "squeezekv/engine/chat_template.h"
#include "squeezekv/engine/generate.h"
#include "squeezekv/eval/text_file.h"

namespace squeezekv::cli {
namespace {

struct GenerateArgs {
  ModelOptions model;
  CacheOptions cache;
  CacheFileOptions files;
  GenerateOptions gen;
  std::string prompt = "Once upon a time";
  std::string prompt_file;
  std::string question;
  CLI::Option* question_option = nullptr;
  bool stats = false;
  bool json = false;
  bool chat = false;
};

// Budgets as text; "all" for a layer that never evicts.
std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ' ';
    s += v[i] >= kUnbounded ? std::string("all") : std::to_string(v[i]);
  }
  return s;
}

void run(GenerateArgs& a) {
  KVCacheConfig config = a.files.loads() ? KVCacheConfig{} : a.cache.resolve();
  if (!a.files.loads()) require_effective(a.cache, config);
  check_cache_file_options(a.files);
  if (!a.prompt_file.empty()) a.prompt = read_text_file(a.prompt_file, "--file");
  const Model model = Model::load(a.model.model_path, a.model.load_options());
  auto pool = a.model.make_pool();
  Engine engine(model, pool.get());
  const auto load_start = std::chrono::steady_clock::now();
  StartingCache start = starting_cache(a.files, a.cache, config, engine);
  const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  config = start.config;
  std::unique_ptr<ModelCache> cache = std::move(start.cache);
  a.gen.n_batch = a.model.n_batch;
  a.gen.n_ctx = a.model.n_ctx;
  // The output's tokens are kept only where they are printed, counted or saved: a stream without
  // --json, --stats or --save-cache runs in constant memory.
  a.gen.keep_tokens = a.json || a.stats || a.files.saves();
  a.gen.continue_cache = a.files.loads();
  if (!a.json && !a.chat) {
    std::printf("%s", a.prompt.c_str());
    std::fflush(stdout);
  }
  // --chat: the prompt is one user turn in the model's own chat template, and the answer ends with
  // the assistant's turn.
  std::vector<int32_t> prompt_tokens;
  if (a.chat) {
    const ChatTemplate chat = chat_template_of(model.file());
    const ChatMessage turn{"user", a.prompt};
    prompt_tokens = encode_chat(model.tokenizer(), chat.format, render_chat(chat, std::span(&turn, 1)));
    a.gen.stop_token = end_of_turn(model.tokenizer(), chat.format);
  } else {
    prompt_tokens = model.tokenizer().encode(a.prompt, true);
  }
  if (a.files.loads()) {
    prompt_tokens = continuation(a.files, start.history, prompt_tokens,
                                 a.chat ? prompt_tokens : model.tokenizer().encode(a.prompt, false));
  }
  if (a.question_option->count() > 0) {
    if (a.chat) throw InvalidArgument(invalid_value("--question", a.question, "has no chat form: drop --chat"));
    a.gen.question = model.tokenizer().encode(a.question, false);
    require(!a.gen.question.empty(), "--question", "\"\"", "encodes to no token");
    if (!a.json) {
      std::printf("%s", a.question.c_str());
      std::fflush(stdout);
    }
  }
  // --save-cache: every token the cache has seen (the file's, the prompt's, the question's, the output's).
  std::vector<int32_t> seen = start.history;
  seen.insert(seen.end(), prompt_tokens.begin(), prompt_tokens.end());
  seen.insert(seen.end(), a.gen.question.begin(), a.gen.question.end());
  if (a.files.saves_after_prompt()) a.gen.after_prompt = [&] { save_cache(a.files, engine, *cache, seen); };
  a.gen.feed_last = a.files.saves() && !a.files.saves_after_prompt();
  Utf8Stream text;  // never prints half a character
  const GenerateResult r = generate(engine, *cache, std::move(prompt_tokens), a.gen, [&](int32_t token) {
    if (a.json) return;
    std::printf("%s", text.push(model.tokenizer().piece(token)).c_str());
    std::fflush(stdout);
  });
  if (!a.json) std::printf("%s", text.finish().c_str());
  if (a.gen.feed_last) {
    seen.insert(seen.end(), r.tokens.begin(), r.tokens.end());
    save_cache(a.files, engine, *cache, seen);
  }
  std::vector<int> kept;
  kept.reserve(size_t(cache->n_layers()));
  for (int l = 0; l < cache->n_layers(); ++l) kept.push_back(cache->layer(l).rows_per_head());
  const double repeats = a.stats || a.json ? repeated_ngram_share(r.tokens, 4) : 0.0;
  const std::vector<int> windows = sliding_windows_of(cache->layer_kinds());
  if (a.json) {
    nlohmann::json out = {{"prompt", valid_utf8(a.prompt)},
                          {"question_tokens", r.question_tokens},
                          {"text", valid_utf8(model.tokenizer().decode(r.tokens))},
                          {"prompt_tokens", r.prompt_tokens.size()},
                          {"generated_tokens", r.n_generated},
                          {"tokens", r.tokens},
                          {"prompt_tokens_per_second", r.prompt_tokens_per_second()},
                          {"decode_tokens_per_second", r.decode_tokens_per_second()},
                          {"method", config.method},
                          {"layer_schedule", cache->scheduled_budgets()},
                          {"layer_budgets", cache->budgets()},
                          {"layer_kept", kept},
                          {"kv_kept_bytes", cache->kept_bytes()},
                          {"kv_full_bytes", cache->full_bytes()},
                          {"repeated_4gram_share", repeats},
                          {"stopped_at_eos", r.stopped_at_eos},
                          {"layer_windows", windows},
                          {"kv_sliding_kept_bytes", cache->sliding_kept_bytes()},
                          {"kv_evicting_kept_bytes", cache->evicting_kept_bytes()}};
    if (a.files.loads()) {
      out["load_cache_seconds"] = load_seconds;
      out["cached_tokens"] = start.history.size();
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("\n");
  std::fprintf(stderr, "\nprompt: %zu tokens, %.1f tokens/s; generated: %zu tokens, %.1f tokens/s\n",
               r.prompt_tokens.size(), r.prompt_tokens_per_second(), size_t(r.n_generated),
               r.decode_tokens_per_second());
  std::fprintf(
      stderr,
      "cache: %s, layer budgets %s\n       kept rows %s\n       KV resident %.1f KiB, a full cache %.1f KiB (%.2fx)\n",
      cache_label(config).c_str(), join(cache->budgets()).c_str(), join(kept).c_str(),
      double(cache->kept_bytes()) / 1024.0, double(cache->full_bytes()) / 1024.0, cache->compression_ratio());
  for (const std::string& line :
       {sliding_note(windows),
        sliding_bytes_note(windows, double(cache->sliding_kept_bytes()), double(cache->evicting_kept_bytes()))}) {
    if (!line.empty()) std::fprintf(stderr, "       %s\n", line.c_str());
  }
  const std::string note = span_note(config, model.config().context_length);
  if (!note.empty()) std::fprintf(stderr, "       %s\n", note.c_str());
  if (a.stats) std::fprintf(stderr, "repeated 4-grams: %.1f %% of the output\n", 100.0 * repeats);
  if (r.last_window_seconds > 0) {
    const double w = double(a.gen.speed_window);
    std::fprintf(stderr, "decode speed: first %lld tokens %.1f tokens/s, last %lld tokens %.1f tokens/s (%.3fx)\n",
                 static_cast<long long>(a.gen.speed_window), w / r.first_window_seconds,
                 static_cast<long long>(a.gen.speed_window), w / r.last_window_seconds,
                 r.first_window_seconds / r.last_window_seconds);
  }
}

void add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "generate text with any eviction method");
  add_model_options(*cmd, args->model);
  auto* prompt = cmd->add_option("-p,--prompt", args->prompt, "prompt text")->capture_default_str();
  cmd->add_option("-f,--file", args->prompt_file, "read the prompt from this file (instead of -p)")->excludes(prompt);
  args->question_option = cmd->add_option(
      "--question", args->question,
      "text asked after the prompt has ended: the cache chooses its rows from the prompt alone (a document read "
      "once, asked about later: query-agnostic), then the question goes in as a chunk of its own");
  cmd->add_option("-n,--n-predict", args->gen.n_predict, "tokens to generate")
      ->capture_default_str()
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  cmd->add_option("-c,--ctx-size", args->model.n_ctx,
                  "context size of a full cache (0 = the model's); an evicting cache takes any length")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--temp", args->gen.sampler.temperature, "temperature (0 = greedy)")->capture_default_str();
  cmd->add_option("--top-k", args->gen.sampler.top_k, "top-k sampling (0 = off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--top-p", args->gen.sampler.top_p, "top-p sampling (1 = off)")->capture_default_str();
  cmd->add_option("--seed", args->gen.sampler.seed, "sampling seed, 0 to 2^64 - 1 (no random seed: -1 is refused)")
      ->capture_default_str();
  cmd->add_flag("--stats", args->stats,
                "also report the share of repeated 4-grams (keeps the output's "
                "tokens; without it a stream runs in constant memory)");
  cmd->add_flag("--ignore-eos", args->gen.ignore_eos, "keep generating past the end-of-sequence token");
  cmd->add_flag("--json", args->json, "print one JSON object instead of streaming text");
  cmd->add_flag("--chat", args->chat,
                "send the prompt as one user message through the model's chat template "
                "(tokenizer.chat_template: ChatML, Llama 3) and print only the reply, which ends with the turn");
  // The engine feeds real attention back, so engine commands score with it (docs/notes/).
  args->cache.command_defaults = {{"method", "full"}, {"score", "attention"}};
  add_cache_options(*cmd, args->cache);
  add_cache_file_options(*cmd, args->files);
  cmd->callback([args] { run(*args); });
}

const CommandRegistration kGenerateCommand{"generate", 50, add_generate_command};

}  // namespace
}  // namespace squeezekv::cli
