#include "squeezekv/eval/needle.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <random>

#include "squeezekv/base/errors.h"
#include "squeezekv/engine/generate.h"
#include "squeezekv/engine/prefill.h"
#include "squeezekv/ops/model_ops.h"

namespace squeezekv {
namespace {

constexpr std::array<std::string_view, 4> kTaskNames = {"passkey", "single", "multikey", "multivalue"};

// llama.cpp's passkey filler and intro; RULER's intro for the magic numbers.
constexpr std::string_view kFiller =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
constexpr std::string_view kPasskeyIntro =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there.";
constexpr std::string_view kMagicIntro =
    "Some special magic numbers are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the numbers afterwards.";

// Keys are adjective-noun pairs, as RULER's words.
constexpr std::array<std::string_view, 16> kAdjectives = {"amber",  "brave",  "calm",  "dusty", "eager", "fuzzy",
                                                          "gentle", "hollow", "icy",   "jolly", "lucky", "misty",
                                                          "noble",  "quiet",  "rusty", "silent"};
constexpr std::array<std::string_view, 16> kNouns = {"anchor",  "badger", "canyon", "dragon", "falcon",  "garden",
                                                     "harbor",  "island", "jungle", "kettle", "lantern", "meadow",
                                                     "orchard", "pepper", "river",  "tower"};

// Uniform integers from a fixed generator by rejection, so that results do not depend on the
// standard library's distributions.
class Draw {
 public:
  explicit Draw(uint64_t seed) : gen_(seed) {}
  uint64_t below(uint64_t n) {                  // uniform in [0, n), n >= 1
    const uint64_t reject_under = (0 - n) % n;  // 2^64 mod n
    uint64_t x = gen_();
    while (x < reject_under) x = gen_();
    return x % n;
  }

 private:
  std::mt19937_64 gen_;
};

// A piece as it reads after a space (SentencePiece prepends its own space marker; byte-level BPE
// takes the space as text), or right after the previous piece when it starts a line.
std::vector<int32_t> encode_piece(const Tokenizer& tokenizer, std::string_view text) {
  if (tokenizer.model() == TokenizerModel::bpe && !text.empty() && text.front() != '\n') {
    std::string spaced = " ";
    spaced += text;
    return tokenizer.encode(spaced, false);
  }
  return tokenizer.encode(text, false);
}

// Distinct values of `digits` digits, the first digit nonzero.
std::vector<std::string> distinct_numbers(Draw& draw, int digits, size_t count) {
  uint64_t lo = 1;
  for (int i = 1; i < digits; ++i) lo *= 10;
  std::vector<std::string> out;
  while (out.size() < count) {
    std::string v = std::to_string(lo + draw.below(9 * lo));
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(std::move(v));
  }
  return out;
}

std::vector<std::string> distinct_keys(Draw& draw, size_t count) {
  std::vector<std::string> out;
  while (out.size() < count) {
    std::string key(kAdjectives[draw.below(kAdjectives.size())]);
    key += '-';
    key += kNouns[draw.below(kNouns.size())];
    if (std::find(out.begin(), out.end(), key) == out.end()) out.push_back(std::move(key));
  }
  return out;
}

// `count` haystack tokens: the filler repeated (passkey), or real text from a paragraph chosen by
// the draw, read on from the start of the text when it runs out.
std::vector<int32_t> haystack_tokens(const Tokenizer& tokenizer, NeedleTask task, std::string_view text, int64_t count,
                                     Draw& draw) {
  std::vector<int32_t> out;
  out.reserve(size_t(count));
  if (task == NeedleTask::passkey) {
    const std::vector<int32_t> filler = encode_piece(tokenizer, kFiller);
    while (int64_t(out.size()) < count) {
      const size_t n = std::min(filler.size(), size_t(count) - out.size());
      out.insert(out.end(), filler.begin(), filler.begin() + long(n));
    }
    return out;
  }
  require(!text.empty(), "haystack", "(empty)", "the task needs real text as its haystack");
  size_t start = size_t(draw.below(text.size()));
  const size_t paragraph = text.find("\n\n", start);
  start = paragraph == std::string_view::npos ? 0 : text.find_first_not_of('\n', paragraph);
  if (start == std::string_view::npos) start = 0;
  // English takes about 4 characters a token; read more until the tokens suffice.
  for (size_t chars = size_t(count) * 6 + 256;; chars *= 2) {
    std::string piece;
    piece.reserve(chars);
    for (size_t at = start; piece.size() < chars; at = 0) {
      if (!piece.empty()) piece += "\n\n";
      piece += text.substr(at, chars - piece.size());
    }
    out = encode_piece(tokenizer, piece);
    if (int64_t(out.size()) >= count) {
      out.resize(size_t(count));
      return out;
    }
    require(chars <= size_t(count) * 256 + text.size(), "haystack", std::to_string(text.size()) + " bytes",
            "tokenizes to too few tokens");
  }
}

}  // namespace

NeedleTask parse_needle_task(std::string_view text) {
  for (size_t i = 0; i < kTaskNames.size(); ++i) {
    if (text == kTaskNames[i]) return NeedleTask(i);
  }
  throw InvalidArgument(invalid_value("task", text, "unknown (passkey, single, multikey, multivalue)"));
}

std::string_view to_string(NeedleTask task) { return kTaskNames[size_t(task)]; }

int needle_answer_tokens(NeedleTask task) {
  switch (task) {
    case NeedleTask::passkey:
      return 12;
    case NeedleTask::single:
    case NeedleTask::multikey:
      return 16;
    case NeedleTask::multivalue:
      return 64;
  }
  return 16;
}

uint64_t needle_sample_seed(uint64_t seed, int64_t index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * uint64_t(index + 1);  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {

std::string single_question(const std::string& key) {
  return "\nWhat is the special magic number for " + key + "? The special magic number for " + key + " is";
}

}  // namespace

NeedleSample make_needle_sample(const Tokenizer& tokenizer, const NeedleSpec& spec, std::string_view haystack) {
  require(spec.depth >= 0.0 && spec.depth <= 1.0, "depth", spec.depth, "must lie in [0, 1]");
  require(spec.length >= 1 && spec.length <= (int64_t(1) << 24), "length", spec.length,
          "must lie in [1, 16777216] tokens");
  Draw draw(spec.seed);
  require(spec.questions >= 1 && spec.questions <= kMaxNeedleQuestions, "questions", spec.questions,
          "must lie in [1, " + std::to_string(kMaxNeedleQuestions) + "]");
  require(spec.questions == 1 || spec.task == NeedleTask::single, "questions", spec.questions,
          "more than one question needs task single (one needle per question, each with its own key)");
  NeedleSample s;
  const NeedleTask task = spec.task;
  // The needles' texts; the first is the asked one.
  std::vector<std::string> texts;
  std::string question;
  if (task == NeedleTask::passkey) {
    s.answers = distinct_numbers(draw, 5, 1);
    const std::string& k = s.answers[0];
    texts.push_back("The pass key is " + k + ". Remember it. " + k + " is the pass key.");
    question = "\nWhat is the pass key? The pass key is";
  } else {
    const auto asked = size_t(spec.questions);
    const size_t n_keys = task == NeedleTask::multikey ? 4 : asked;
    const size_t n_values = task == NeedleTask::multikey ? 4 : task == NeedleTask::multivalue ? 4 : asked;
    const std::vector<std::string> keys = distinct_keys(draw, n_keys);
    const std::vector<std::string> values = distinct_numbers(draw, 7, n_values);
    s.key = keys[0];
    for (size_t i = 0; i < n_values; ++i) {
      const std::string& key = keys[std::min(i, n_keys - 1)];
      if (task == NeedleTask::multivalue) {
        texts.push_back("One of the special magic numbers for " + key + " is: " + values[i] + ".");
      } else {
        texts.push_back("The special magic number for " + key + " is: " + values[i] + ".");
      }
    }
    if (task == NeedleTask::multivalue) {
      s.answers = values;
      question =
          "\nWhat are all the special magic numbers for " + s.key + "? The special magic numbers for " + s.key + " are";
    } else {
      s.answers = {values[0]};
      if (task == NeedleTask::multikey) s.distractors.assign(values.begin() + 1, values.end());
      question = single_question(s.key);
      for (size_t i = 1; i < asked; ++i) {
        s.more.push_back({encode_piece(tokenizer, single_question(keys[i])), {values[i]}});
      }
    }
  }
  std::vector<std::vector<int32_t>> needles;
  int64_t needle_total = 0;
  for (const std::string& t : texts) {
    needles.push_back(encode_piece(tokenizer, t));
    needle_total += int64_t(needles.back().size());
  }
  if (tokenizer.add_bos_default() && tokenizer.bos()) s.context.push_back(*tokenizer.bos());
  const std::vector<int32_t> intro = encode_piece(tokenizer, task == NeedleTask::passkey ? kPasskeyIntro : kMagicIntro);
  s.context.insert(s.context.end(), intro.begin(), intro.end());
  s.question = encode_piece(tokenizer, question);
  const int64_t fixed = int64_t(s.context.size() + s.question.size());
  // At least twice the needles' tokens of haystack, so that every needle finds a place.
  const int64_t least = fixed + 3 * needle_total;
  if (spec.questions > 1 && spec.length < least) {
    require(false, "questions", spec.questions,
            "needles do not fit a prompt of " + std::to_string(spec.length) + " tokens (they need at least " +
                std::to_string(least) + ")");
  }
  require(spec.length >= least, "length", spec.length,
          "too short for task " + std::string(to_string(task)) + " (at least " + std::to_string(least) + " tokens)");
  const int64_t region = spec.length - fixed;
  const auto n0 = int64_t(needles[0].size());
  const auto start = int64_t(std::llround(spec.depth * double(region - n0)));
  s.needle_token = int64_t(s.context.size()) + start;
  s.needle_tokens = n0;

  // The other needles go before or after the asked one, at random, where they fit.
  const int64_t side_len[2] = {start, region - start - n0};
  std::vector<size_t> side[2];
  int64_t used[2] = {0, 0};
  for (size_t i = 1; i < needles.size(); ++i) {
    const int b = int64_t(draw.below(uint64_t(region - n0))) < start ? 0 : 1;
    side[b].push_back(i);
    used[b] += int64_t(needles[i].size());
  }
  for (int b = 0; b < 2; ++b) {
    while (used[b] > side_len[b] && !side[b].empty()) {
      const size_t i = side[b].back();
      side[b].pop_back();
      side[1 - b].push_back(i);
      used[b] -= int64_t(needles[i].size());
      used[1 - b] += int64_t(needles[i].size());
    }
  }
  if (used[0] > side_len[0] || used[1] > side_len[1]) {
    const int big = side_len[0] >= side_len[1] ? 0 : 1;  // holds them all, as region >= 3 needle_total
    side[big].insert(side[big].end(), side[1 - big].begin(), side[1 - big].end());
    side[1 - big].clear();
    used[big] += used[1 - big];
    used[1 - big] = 0;
  }
  for (auto& ids : side) std::sort(ids.begin(), ids.end());

  const std::vector<int32_t> hay = haystack_tokens(tokenizer, task, haystack, region - needle_total, draw);
  std::vector<int32_t>& out = s.context;
  size_t cursor = 0;
  auto take_hay = [&](int64_t n) {
    out.insert(out.end(), hay.begin() + long(cursor), hay.begin() + long(cursor) + long(n));
    cursor += size_t(n);
  };
  auto lay_side = [&](int b) {
    const int64_t hay_here = side_len[b] - used[b];
    std::vector<std::pair<int64_t, size_t>> at;  // (haystack offset, needle)
    for (size_t i : side[b]) at.emplace_back(int64_t(draw.below(uint64_t(hay_here) + 1)), i);
    std::stable_sort(at.begin(), at.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    int64_t done = 0;
    for (const auto& [offset, i] : at) {
      take_hay(offset - done);
      done = offset;
      out.insert(out.end(), needles[i].begin(), needles[i].end());
    }
    take_hay(hay_here - done);
  };
  lay_side(0);
  out.insert(out.end(), needles[0].begin(), needles[0].end());
  lay_side(1);
  return s;
}

bool contains_number(std::string_view text, std::string_view value) {
  if (value.empty()) return false;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  for (size_t at = text.find(value); at != std::string_view::npos; at = text.find(value, at + 1)) {
    const bool left = at > 0 && digit(text[at - 1]);
    const bool right = at + value.size() < text.size() && digit(text[at + value.size()]);
    if (!left && !right) return true;
  }
  return false;
}

bool needle_correct(std::string_view text, const std::vector<std::string>& answers) {
  if (answers.empty()) return false;
  return std::all_of(answers.begin(), answers.end(), [&](const std::string& a) { return contains_number(text, a); });
}

NeedleOutcome run_needle_sample(Engine& engine, ModelCache& cache, const NeedleSample& sample, NeedleTask task,
                                const NeedleRunOptions& options) {
  require(options.n_batch >= 1, "n_batch", options.n_batch, "must be >= 1");
  require(options.n_predict >= 0 && options.n_predict <= 4096, "n_predict", options.n_predict,
          "must lie in [0, 4096] (0 = the task's default)");
  require(!sample.context.empty() && !sample.question.empty(), "sample", "(empty)", "has no context or question");
  const auto start = std::chrono::steady_clock::now();
  const int n_predict = options.n_predict > 0 ? options.n_predict : needle_answer_tokens(task);
  PrefillOptions prefill_options;
  prefill_options.n_batch = options.n_batch;
  require_fits_context(cache.config(), int64_t(sample.context.size() + sample.question.size()), n_predict,
                       engine.model().config().context_length);
  prefill_options.max_rows = int64_t(sample.context.size() + sample.question.size()) + n_predict;
  std::vector<float> logits;
  if (options.context_in_cache || options.after_context) {
    require(!options.question_in_prompt, "question_in_prompt", "true",
            "the context and the question are then one prompt: no cache holds the context alone to save or load");
  }
  if (options.context_in_cache) {
    require(cache.layer(0).tokens_seen() == int64_t(sample.context.size()), "cache",
            std::to_string(cache.layer(0).tokens_seen()) + " tokens",
            "does not hold the sample's context of " + std::to_string(sample.context.size()) + " tokens");
  }
  if (options.question_in_prompt) {
    std::vector<int32_t> prompt = sample.context;
    prompt.insert(prompt.end(), sample.question.begin(), sample.question.end());
    prefill(engine, cache, prompt, prefill_options, logits);
  } else {
    // The cache chooses its rows from the context alone; the question follows as its own chunk.
    prefill_options.logits = Logits::none;
    if (!options.context_in_cache) prefill(engine, cache, sample.context, prefill_options, logits);
    if (options.after_context) options.after_context(cache);
    prefill_options.reset = false;
    prefill_options.as_prompt = false;
    prefill_options.logits = Logits::last;
    prefill(engine, cache, sample.question, prefill_options, logits);
  }
  NeedleOutcome out;
  out.kv_bytes = cache.kept_bytes();
  out.full_kv_bytes = cache.full_bytes();
  double rows = 0.0;
  for (int l = 0; l < cache.n_layers(); ++l) rows += cache.layer(l).rows_per_head();
  out.kv_rows = cache.n_layers() > 0 ? rows / cache.n_layers() : 0.0;
  const Tokenizer& tokenizer = engine.model().tokenizer();
  // Greedy decoding; the lowest id wins a tie. Every answer token but the last goes into the cache.
  auto answer = [&] {
    std::vector<int32_t> tokens;
    for (int i = 0; i < n_predict && !logits.empty(); ++i) {
      const auto token = int32_t(argmax(logits.data(), int64_t(logits.size())));
      if (tokenizer.is_end_of_generation(token)) break;
      tokens.push_back(token);
      if (i + 1 < n_predict) engine.forward(std::span(&token, 1), cache, Logits::last, logits);
    }
    return tokenizer.decode(tokens);
  };
  out.text = answer();
  out.correct = needle_correct(out.text, sample.answers);
  for (const NeedleQuestion& q : sample.more) {
    PrefillOptions next;
    next.n_batch = options.n_batch;
    next.reset = false;
    next.as_prompt = false;
    prefill(engine, cache, q.tokens, next, logits);
    out.more_texts.push_back(answer());
    out.more_correct.push_back(needle_correct(out.more_texts.back(), q.answers));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

double NeedleOutcome::score() const {
  double right = correct ? 1.0 : 0.0;
  for (const uint8_t c : more_correct) right += c ? 1.0 : 0.0;
  return right / double(1 + more_correct.size());
}

namespace {

// The cell's accuracy (every question counted) and means over its samples' outcomes.
NeedleCell cell_of(std::vector<NeedleOutcome> outcomes) {
  NeedleCell cell;
  cell.outcomes = std::move(outcomes);
  double correct = 0.0;
  for (const NeedleOutcome& o : cell.outcomes) {
    correct += o.score();
    if (cell.question_accuracy.size() < 1 + o.more_correct.size()) {
      cell.question_accuracy.resize(1 + o.more_correct.size());
    }
    cell.question_accuracy[0] += o.correct ? 1.0 : 0.0;
    for (size_t i = 0; i < o.more_correct.size(); ++i) cell.question_accuracy[1 + i] += o.more_correct[i] ? 1.0 : 0.0;
    cell.kv_bytes += double(o.kv_bytes);
    cell.full_kv_bytes += double(o.full_kv_bytes);
    cell.kv_rows += o.kv_rows;
    cell.seconds += o.seconds;
  }
  const auto n = double(cell.outcomes.size());
  cell.accuracy = correct / n;
  for (double& a : cell.question_accuracy) a /= n;
  cell.kv_bytes /= n;
  cell.full_kv_bytes /= n;
  cell.kv_rows /= n;
  return cell;
}

}  // namespace

NeedleCell run_needle_cell(Engine& engine, const KVCacheConfig& config, std::span<const NeedleSample> samples,
                           NeedleTask task, const NeedleRunOptions& options,
                           const std::function<void()>& after_sample) {
  require(!samples.empty(), "samples", 0, "a cell needs at least one sample");
  auto cache = engine.make_cache(config);
  std::vector<NeedleOutcome> outcomes;
  for (const NeedleSample& sample : samples) {
    outcomes.push_back(run_needle_sample(engine, *cache, sample, task, options));
    if (after_sample) after_sample();
  }
  return cell_of(std::move(outcomes));
}

NeedleCell run_needle_cell_on(Engine& engine, ModelCache& cache, const NeedleSample& sample, NeedleTask task,
                              const NeedleRunOptions& options, const std::function<void()>& after_sample) {
  std::vector<NeedleOutcome> outcomes = {run_needle_sample(engine, cache, sample, task, options)};
  if (after_sample) after_sample();
  return cell_of(std::move(outcomes));
}

}  // namespace squeezekv
