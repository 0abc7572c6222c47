// Needle in a haystack, RULER-style: a fact (a pass key, a key's magic number) hidden at a chosen
// depth of a long prompt of an exact token length, asked for at its end, answered greedily with any
// cache, and scored by exact match. Every eviction method is measured on the same prompts.
//
// The prompt, all counted in the model's tokens:
//   [BOS] intro | haystack with the needle(s) | question
// It holds exactly `length` tokens, BOS and question included (the answer's tokens come after, so
// a prompt as long as the model's context decodes its few answer tokens just past it). The
// region between intro and question is `length - prefix - question` tokens; the asked needle
// (multivalue: its first value's) starts `round(depth * (region - needle))` tokens into it, so
// depth 0 puts it right after the intro and depth 1 right before the question. Other needles
// (multikey's distractors, multivalue's other values) sit at random places of the region. Pieces
// are tokenized alone (each as if after a space) and joined as token ids; the haystack is cut at
// token level, so the prompt is a token sequence, not the re-tokenization of its text.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "squeezekv/engine/engine.h"
#include "squeezekv/engine/tokenizer.h"

namespace squeezekv {

// passkey: a 5-digit key in repeated filler sentences (llama.cpp's passkey example);
// single: "The special magic number for KEY is: VALUE." in real text;
// multikey: the asked needle among 3 others with different keys;
// multivalue: 4 values for one key, all to be recalled.
enum class NeedleTask { passkey, single, multikey, multivalue };

NeedleTask parse_needle_task(std::string_view text);  // InvalidArgument naming "task"
std::string_view to_string(NeedleTask task);

// Tokens greedy decoding needs for the task's answer (digits are often one token each).
int needle_answer_tokens(NeedleTask task);

struct NeedleSpec {
  NeedleTask task = NeedleTask::passkey;
  int64_t length = 1024;  // prompt tokens, BOS and question included
  double depth = 0.5;     // in [0, 1]
  uint64_t seed = 0;      // picks keys, values, the haystack's start and the other needles' places
  // Task single only: this many needles with different keys, each asked in turn after the answer
  // to the one before (the first at `depth`, the others at random places), against one cache
  // compressed from the context: a chat over a document. 1: the classic single question.
  int questions = 1;
};

inline constexpr int kMaxNeedleQuestions = 64;

// A question asked after the first (NeedleSpec::questions).
struct NeedleQuestion {
  std::vector<int32_t> tokens;
  std::vector<std::string> answers;
};

struct NeedleSample {
  std::vector<int32_t> context;          // [BOS] intro, haystack and needles: what the cache sees first
  std::vector<int32_t> question;         // the prompt's last tokens; context + question = length tokens
  std::string key;                       // the asked key ("" for passkey)
  std::vector<std::string> answers;      // what must be recalled (multivalue: 4 values)
  std::vector<std::string> distractors;  // the other keys' values (multikey)
  int64_t needle_token = 0;              // index in the prompt of the asked needle's first token
  int64_t needle_tokens = 0;             // its length in tokens
  std::vector<NeedleQuestion> more;      // the questions asked after the first, in order
};

// One sample; identical input gives identical tokens. `haystack` is the real text of the tasks
// other than passkey (ignored by passkey; it must hold some text otherwise). InvalidArgument
// naming the field when the length leaves too little haystack (under twice the needles' tokens)
// or the depth lies outside [0, 1].
NeedleSample make_needle_sample(const Tokenizer& tokenizer, const NeedleSpec& spec, std::string_view haystack);

// The seed of sample `index` of a run seeded with `seed` (splitmix64): sample i holds the same
// key and values at every length and depth.
uint64_t needle_sample_seed(uint64_t seed, int64_t index);

// Whether `text` holds `value` as a whole number: digits on neither side ("1234567" is not found
// in "12345678"); words around it are fine.
bool contains_number(std::string_view text, std::string_view value);
// Every answer is in the text (multivalue: all of them).
bool needle_correct(std::string_view text, const std::vector<std::string>& answers);

struct NeedleRunOptions {
  int n_batch = 512;  // prompt tokens per forward call, eviction between them
  int n_predict = 0;  // tokens decoded; 0 = needle_answer_tokens(task)
  // false (query-agnostic): the context is one prompt in n_batch chunks, its eviction done
  // (snapkv's included) before the question arrives as a chunk of its own. true (query-aware):
  // context and question are one prompt, so snapkv's observation window sees the question.
  bool question_in_prompt = false;
  // Saved caches (engine/cache_file.h; not with question_in_prompt, where no cache holds the
  // context alone): the cache already holds the sample's context (a loaded file), so only the
  // question is fed; and/or a call once the context is in the cache, before the question (to save it).
  bool context_in_cache = false;
  std::function<void(const ModelCache&)> after_context;
};

struct NeedleOutcome {
  std::string text;  // the greedy answer
  bool correct = false;
  size_t kv_bytes = 0;       // resident K/V bytes when the answer starts
  size_t full_kv_bytes = 0;  // what a full cache of the same storage would hold there
  double kv_rows = 0.0;      // rows per layer and head (rows_per_head), averaged over layers
  double seconds = 0.0;
  // The questions after the first (NeedleSample::more): each answer and whether it is right.
  std::vector<std::string> more_texts;
  std::vector<uint8_t> more_correct;
  // The share of the sample's questions answered right (correct alone for one question).
  double score() const;
};

// Runs one sample through `cache` (reset first): prefill as the options say, then greedy
// decoding until EOS or n_predict tokens; then each further question (NeedleSample::more), fed
// after the answer before it, and its answer.
NeedleOutcome run_needle_sample(Engine& engine, ModelCache& cache, const NeedleSample& sample, NeedleTask task,
                                const NeedleRunOptions& options);

// One cell of a grid: every sample through one cache configuration.
struct NeedleCell {
  std::vector<NeedleOutcome> outcomes;                        // per sample, in order
  double accuracy = 0.0;                                      // share of correct answers, every question counted
  std::vector<double> question_accuracy;                      // per question (one: the first alone)
  double kv_bytes = 0.0, full_kv_bytes = 0.0, kv_rows = 0.0;  // means over the samples
  double seconds = 0.0;
};

// `after_sample()` is called after each sample (progress).
NeedleCell run_needle_cell(Engine& engine, const KVCacheConfig& config, std::span<const NeedleSample> samples,
                           NeedleTask task, const NeedleRunOptions& options,
                           const std::function<void()>& after_sample = {});
// A cell of one sample on `cache` as it stands (a loaded cache file that holds the sample's
// context, with options.context_in_cache): `needle --load-cache`.
NeedleCell run_needle_cell_on(Engine& engine, ModelCache& cache, const NeedleSample& sample, NeedleTask task,
                              const NeedleRunOptions& options, const std::function<void()>& after_sample = {});

}  // namespace squeezekv
