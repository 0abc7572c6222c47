// Needle in a haystack: the generator's exact lengths and depths, the scorer's rules, and on
// SmolLM2 that the full cache finds a pass key that a sliding window past it loses.
#include "squeezekv/eval/needle.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "real_models.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/eval/text_file.h"
#include "stories_model.h"

namespace squeezekv {
namespace {

const std::string& haystack() {
  static const std::string text = read_text_file(test::kTinyStoriesText);
  return text;
}

constexpr NeedleTask kTasks[] = {NeedleTask::passkey, NeedleTask::single, NeedleTask::multikey, NeedleTask::multivalue};

TEST(Needle, TaskNamesRoundTripAndUnknownIsNamed) {
  for (NeedleTask t : kTasks) EXPECT_EQ(parse_needle_task(to_string(t)), t);
  try {
    parse_needle_task("haystack");
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("task = haystack"), std::string::npos) << e.what();
  }
}

TEST(Needle, SameSeedSamePromptOtherSeedAnother) {
  const Tokenizer& tok = test::stories().tokenizer();
  for (NeedleTask t : kTasks) {
    const NeedleSample a = make_needle_sample(tok, {t, 1024, 0.3, 7}, haystack());
    const NeedleSample b = make_needle_sample(tok, {t, 1024, 0.3, 7}, haystack());
    const NeedleSample c = make_needle_sample(tok, {t, 1024, 0.3, 8}, haystack());
    EXPECT_EQ(a.context, b.context) << to_string(t);
    EXPECT_EQ(a.question, b.question);
    EXPECT_EQ(a.answers, b.answers);
    EXPECT_NE(a.context, c.context) << to_string(t);
    EXPECT_NE(a.answers, c.answers) << to_string(t);
  }
  EXPECT_NE(needle_sample_seed(0, 0), needle_sample_seed(0, 1));
  EXPECT_NE(needle_sample_seed(0, 0), needle_sample_seed(1, 0));
}

// Exact token counts with both tokenizers (SentencePiece and byte-level BPE), every task.
TEST(Needle, PromptHasExactlyTheRequestedTokens) {
  for (const Model* model : {&test::stories(), &test::smollm2()}) {
    const Tokenizer& tok = model->tokenizer();
    for (NeedleTask t : kTasks) {
      for (int64_t length : {777, 1024, 2048, 4096}) {
        for (double depth : {0.0, 0.5, 1.0}) {
          const NeedleSample s = make_needle_sample(tok, {t, length, depth, 3}, haystack());
          EXPECT_EQ(int64_t(s.context.size() + s.question.size()), length)
              << to_string(t) << " length " << length << " depth " << depth;
          if (tok.add_bos_default() && tok.bos()) {
            EXPECT_EQ(s.context.front(), *tok.bos());
          }
        }
      }
    }
  }
}

// The asked needle's first token sits at the requested depth of the region between the intro
// (where depth 0 puts it) and the question, within one token; its tokens spell the answer.
TEST(Needle, NeedleStartsAtTheRequestedDepth) {
  for (const Model* model : {&test::stories(), &test::smollm2()}) {
    const Tokenizer& tok = model->tokenizer();
    for (NeedleTask t : kTasks) {
      const int64_t length = 2048;
      const int64_t intro_end = make_needle_sample(tok, {t, length, 0.0, 5}, haystack()).needle_token;
      for (double depth : {0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0}) {
        const NeedleSample s = make_needle_sample(tok, {t, length, depth, 5}, haystack());
        const int64_t region = length - intro_end - int64_t(s.question.size());
        const double expected = double(intro_end) + depth * double(region - s.needle_tokens);
        EXPECT_LE(std::abs(double(s.needle_token) - expected), 1.0) << to_string(t) << " depth " << depth;
        ASSERT_LE(s.needle_token + s.needle_tokens, int64_t(s.context.size()));
        const std::vector<int32_t> needle(s.context.begin() + s.needle_token,
                                          s.context.begin() + s.needle_token + s.needle_tokens);
        EXPECT_TRUE(contains_number(tok.decode(needle), s.answers[0])) << tok.decode(needle);
        if (!s.key.empty()) {
          EXPECT_NE(tok.decode(needle).find(s.key), std::string::npos);
        }
      }
    }
  }
}

TEST(Needle, AnswersAndDistractorsDiffer) {
  const Tokenizer& tok = test::smollm2().tokenizer();
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const NeedleSample p = make_needle_sample(tok, {NeedleTask::passkey, 1024, 0.5, seed}, haystack());
    ASSERT_EQ(p.answers.size(), 1u);
    EXPECT_EQ(p.answers[0].size(), 5u);
    const NeedleSample mk = make_needle_sample(tok, {NeedleTask::multikey, 1024, 0.5, seed}, haystack());
    ASSERT_EQ(mk.answers.size(), 1u);
    ASSERT_EQ(mk.distractors.size(), 3u);
    std::set<std::string> values(mk.distractors.begin(), mk.distractors.end());
    values.insert(mk.answers[0]);
    EXPECT_EQ(values.size(), 4u);
    const std::string text = tok.decode(mk.context);
    for (const std::string& v : values) {
      EXPECT_EQ(v.size(), 7u);
      EXPECT_TRUE(contains_number(text, v)) << v;  // every needle is in the prompt
    }
    EXPECT_NE(tok.decode(mk.question).find(mk.key), std::string::npos);
    const NeedleSample mv = make_needle_sample(tok, {NeedleTask::multivalue, 1024, 0.5, seed}, haystack());
    ASSERT_EQ(mv.answers.size(), 4u);
    EXPECT_EQ(std::set<std::string>(mv.answers.begin(), mv.answers.end()).size(), 4u);
    for (const std::string& v : mv.answers) EXPECT_TRUE(contains_number(tok.decode(mv.context), v)) << v;
  }
}

TEST(Needle, TooShortAndBadDepthAreNamed) {
  const Tokenizer& tok = test::smollm2().tokenizer();
  EXPECT_THROW(make_needle_sample(tok, {NeedleTask::multivalue, 64, 0.5, 0}, haystack()), InvalidArgument);
  EXPECT_THROW(make_needle_sample(tok, {NeedleTask::passkey, 1024, 1.5, 0}, haystack()), InvalidArgument);
  EXPECT_THROW(make_needle_sample(tok, {NeedleTask::passkey, 1024, std::nan(""), 0}, haystack()), InvalidArgument);
  EXPECT_THROW(make_needle_sample(tok, {NeedleTask::single, 1024, 0.5, 0}, ""), InvalidArgument);
}

// --questions: one needle per question, each with its own key and value, all in the context at
// the prompt's exact length; each later question names its own key; other tasks are refused.
TEST(Needle, SeveralQuestionsEachFindTheirNeedle) {
  const Tokenizer& tok = test::stories().tokenizer();
  NeedleSpec spec{NeedleTask::single, 1024, 0.4, 11};
  spec.questions = 4;
  const NeedleSample s = make_needle_sample(tok, spec, haystack());
  EXPECT_EQ(int64_t(s.context.size() + s.question.size()), 1024);
  ASSERT_EQ(s.more.size(), 3u);
  const std::string context = tok.decode(s.context);
  std::set<std::string> values = {s.answers[0]};
  EXPECT_NE(context.find("The special magic number for " + s.key + " is: " + s.answers[0] + "."), std::string::npos);
  for (const NeedleQuestion& q : s.more) {
    ASSERT_EQ(q.answers.size(), 1u);
    EXPECT_TRUE(values.insert(q.answers[0]).second) << "a value asked twice";
    const std::string question = tok.decode(q.tokens);
    const size_t at = question.find("for ") + 4;
    const std::string key = question.substr(at, question.find('?') - at);
    EXPECT_NE(key, s.key);
    EXPECT_NE(context.find("The special magic number for " + key + " is: " + q.answers[0] + "."), std::string::npos)
        << key;
  }
  for (const NeedleTask t : {NeedleTask::passkey, NeedleTask::multikey, NeedleTask::multivalue}) {
    NeedleSpec other{t, 1024, 0.4, 11};
    other.questions = 2;
    EXPECT_THROW(make_needle_sample(tok, other, haystack()), InvalidArgument);
  }
  spec.questions = kMaxNeedleQuestions + 1;
  EXPECT_THROW(make_needle_sample(tok, spec, haystack()), InvalidArgument);
}

TEST(Needle, ScorerRules) {
  EXPECT_TRUE(needle_correct(" 1234567.", {"1234567"}));
  EXPECT_TRUE(needle_correct("The number is 1234567, I think", {"1234567"}));  // extra words are fine
  EXPECT_FALSE(needle_correct(" 1234568.", {"1234567"}));                      // a wrong digit
  EXPECT_FALSE(needle_correct(" 12345678", {"1234567"}));                      // a longer number
  EXPECT_FALSE(needle_correct(" 01234567", {"1234567"}));
  EXPECT_FALSE(needle_correct(" 123456", {"1234567"}));
  EXPECT_TRUE(needle_correct("12345678 and then 1234567", {"1234567"}));  // a whole one later
  EXPECT_TRUE(needle_correct("1111111, 2222222 and 3333333", {"3333333", "1111111", "2222222"}));
  EXPECT_FALSE(needle_correct("1111111, 2222222", {"1111111", "2222222", "3333333"}));  // partial multivalue
  EXPECT_FALSE(needle_correct("anything", {}));
}

// CI size (it runs under AddressSanitizer too): one pass key near the start of 512 tokens.
TEST(Needle, SmolLM2FullCacheFindsThePasskeyAWindowPastItDoesNot) {
  const Model& model = test::smollm2();
  ThreadPool pool(2);
  Engine engine(model, &pool);
  const NeedleSample sample = make_needle_sample(model.tokenizer(), {NeedleTask::passkey, 512, 0.1, 1}, "");
  ASSERT_LT(sample.needle_token + sample.needle_tokens, 512 - 64 - 128);  // the window has passed it
  NeedleRunOptions options;
  options.n_batch = 128;
  KVCacheConfig full;
  full.method = "full";
  const NeedleCell f = run_needle_cell(engine, full, std::span(&sample, 1), NeedleTask::passkey, options);
  EXPECT_EQ(f.accuracy, 1.0) << "full cache answered '" << f.outcomes[0].text << "', key " << sample.answers[0];
  EXPECT_DOUBLE_EQ(f.kv_rows, 512.0);
  KVCacheConfig window;
  window.method = "window";
  window.budget = 64;
  const NeedleCell w = run_needle_cell(engine, window, std::span(&sample, 1), NeedleTask::passkey, options);
  EXPECT_EQ(w.accuracy, 0.0) << "window answered '" << w.outcomes[0].text << "'";
  EXPECT_LT(w.kv_bytes, f.kv_bytes / 2);
  EXPECT_EQ(w.full_kv_bytes, f.full_kv_bytes);
}

}  // namespace
}  // namespace squeezekv
