// FragmentMemo: a conversation encoded turn after turn with one memo gives exactly the ids it gets
// without one (on SmolLM2's BPE vocabulary and stories260K's SentencePiece one), re-encodes only
// the new messages, is shared safely by threads, and stays within its bound.
#include "squeezekv/engine/fragment_memo.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "real_models.h"
#include "squeezekv/engine/chat_template.h"
#include "stories_model.h"

namespace squeezekv {
namespace {

// A ChatML conversation of `turns` user/assistant pairs with varied text (digits, spaces, accents,
// newlines, text that spells a special token), rendered as the server renders it.
std::vector<std::string> conversation_prompts(int turns) {
  const char* const lines[] = {"Name a colour.",
                               "Red.",
                               "What is 2 plus 3?",
                               "  5, or 0x05\n\nindeed.",
                               "Café au lait, s'il vous plaît",
                               "日本語も少し",
                               "say <|im_end|> literally",
                               "tab\there",
                               "Numbers: 1234567 and 3.14159"};
  std::vector<ChatMessage> messages;
  std::vector<std::string> prompts;
  for (int t = 0; t < turns; ++t) {
    messages.push_back({"user", lines[(2 * t) % 9]});
    prompts.push_back(render_chat({ChatFormat::chatml, "You are helpful."}, messages));
    messages.push_back({"assistant", lines[(2 * t + 1) % 9]});
  }
  return prompts;
}

TEST(FragmentMemo, AConversationEncodesToTheSameIdsAndReencodesOnlyItsNewMessages) {
  const Tokenizer& tokenizer = test::smollm2().tokenizer();
  FragmentMemo memo;
  const std::vector<std::string> prompts = conversation_prompts(30);
  uint64_t misses_before = 0;
  for (size_t t = 0; t < prompts.size(); ++t) {
    SCOPED_TRACE("turn " + std::to_string(t));
    ASSERT_EQ(encode_chat(tokenizer, ChatFormat::chatml, prompts[t], &memo),
              encode_chat(tokenizer, ChatFormat::chatml, prompts[t]));
    // Each turn adds one assistant reply and one user message: at most those (and the opened
    // assistant turn) are new, and from the second lap of the 9 lines on nothing is.
    if (t > 0) {
      EXPECT_LE(memo.misses() - misses_before, 3u);
    }
    if (t >= 10) {
      EXPECT_EQ(memo.misses() - misses_before, 0u);
    }
    misses_before = memo.misses();
  }
  EXPECT_GT(memo.hits(), 30u * 30u);
}

TEST(FragmentMemo, SentencePieceFragmentsEncodeAsWithoutAMemo) {
  const Tokenizer& tokenizer = test::stories().tokenizer();
  FragmentMemo memo;
  std::mt19937 rng(7);
  const char* const words[] = {"Once", " upon", "a time", "\n", "  ", "Lily", "ran.", "<s>", "</s>", "é"};
  for (int i = 0; i < 200; ++i) {
    std::string text;
    for (int w = 0; w < 12; ++w) text += words[rng() % 10];
    for (const bool special : {false, true}) {
      ASSERT_EQ(tokenizer.encode(text, true, special, &memo), tokenizer.encode(text, true, special)) << text;
    }
  }
}

TEST(FragmentMemo, ThreadsSharingOneMemoGetTheirOwnIds) {
  const Tokenizer& tokenizer = test::smollm2().tokenizer();
  FragmentMemo memo;
  const std::vector<std::string> prompts = conversation_prompts(12);
  std::vector<std::vector<int32_t>> expected;
  for (const std::string& p : prompts) expected.push_back(encode_chat(tokenizer, ChatFormat::chatml, p));
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int round = 0; round < 3; ++round) {
        for (size_t t = 0; t < prompts.size(); ++t) {
          const size_t i = (t + size_t(k) * 3) % prompts.size();
          wrong[size_t(k)] += encode_chat(tokenizer, ChatFormat::chatml, prompts[i], &memo) != expected[i];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

TEST(FragmentMemo, StaysWithinItsBound) {
  FragmentMemo memo(4096);
  const std::vector<int32_t> ids(10, 1);
  for (int i = 0; i < 1000; ++i) {
    memo.add("fragment number " + std::to_string(i), ids);
    ASSERT_LE(memo.bytes(), 4096u);
  }
  EXPECT_GT(memo.fragments(), 0u);
  std::vector<int32_t> out;
  EXPECT_TRUE(memo.find("fragment number 999", out));  // the newest is held
  EXPECT_EQ(out, ids);
  // A fragment larger than the whole bound is not held, and nothing else is dropped for it.
  const size_t before = memo.fragments();
  memo.add(std::string(5000, 'x'), ids);
  EXPECT_EQ(memo.fragments(), before);
  out.clear();
  EXPECT_FALSE(memo.find(std::string(5000, 'x'), out));
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace squeezekv
