// Chat templates: the families recognised by their markers, the system message a template adds,
// and what SmolLM2's own template and vocabulary make of a conversation.
#include "squeezekv/engine/chat_template.h"

#include <gtest/gtest.h>

#include "real_models.h"

namespace squeezekv {
namespace {

TEST(ChatTemplate, DetectsTheFamiliesByTheirMarkers) {
  EXPECT_EQ(detect_chat_format("{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
                               "{{ m.content }}<|eot_id|>{% endfor %}"),
            ChatFormat::llama3);
  EXPECT_EQ(detect_chat_format("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>"),
            ChatFormat::chatml);
  EXPECT_EQ(detect_chat_format("{{ bos_token }}[INST] {{ m.content }} [/INST]"), ChatFormat::plain);
  EXPECT_EQ(detect_chat_format(""), ChatFormat::plain);
}

TEST(ChatTemplate, RendersEachFormat) {
  const ChatMessage m[] = {{"system", "Be brief."}, {"user", "Hi"}};
  EXPECT_EQ(render_chat({ChatFormat::chatml, {}}, m),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat({ChatFormat::llama3, {}}, m),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>"
            "\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render_chat({ChatFormat::plain, {}}, m), "system: Be brief.\nuser: Hi\nassistant:");
}

// Gemma's turns: the assistant is "model", and a system message opens the first user turn (the
// template of google/gemma-3-270m-it); the 270M base file carries no template and gets these turns.
TEST(ChatTemplate, RendersGemmaTurns) {
  EXPECT_EQ(detect_chat_format("{{ bos_token }}<start_of_turn>{{ role }}\n{{ message['content'] }}<end_of_turn>"),
            ChatFormat::gemma);
  const ChatMessage m[] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};
  EXPECT_EQ(render_chat({ChatFormat::gemma, {}}, m),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  const GgufFile gemma = GgufFile::open(test::real_model_path(test::kGemma3File));
  const ChatTemplate chat = chat_template_of(gemma);
  EXPECT_EQ(chat.format, ChatFormat::gemma);
  const Tokenizer tokenizer(gemma);
  const ChatMessage hi[] = {{"user", "hello"}};
  // printf '<start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n' |
  //   llama-tokenize -m gemma-3-270m-q4_k_m.gguf --stdin --ids --log-disable --no-escape
  EXPECT_EQ(encode_chat(tokenizer, chat.format, render_chat(chat, hi)),
            (std::vector<int32_t>{2, 105, 2364, 107, 23391, 106, 107, 105, 4368, 107}));
  EXPECT_EQ(end_of_turn(tokenizer, chat.format), 106);
}

// The default system message as SmolLM2 writes it (newlines inside the literal) and as Qwen2 does
// (escaped, after a turn built from the messages, which is not a default).
TEST(ChatTemplate, FindsTheDefaultSystemMessage) {
  const ChatTemplate smol = parse_chat_template(
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
      "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}");
  EXPECT_EQ(smol.format, ChatFormat::chatml);
  EXPECT_EQ(smol.default_system, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  const ChatTemplate qwen = parse_chat_template(
      "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
      "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a "
      "helpful assistant.<|im_end|>\\n' }}{%- endif %}");
  EXPECT_EQ(qwen.default_system, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_EQ(parse_chat_template("<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>").default_system, "");

  const ChatMessage user{"user", "Hi"};
  EXPECT_EQ(render_chat(qwen, std::span(&user, 1)),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  const ChatMessage own[] = {{"system", "Be brief."}, user};
  EXPECT_EQ(render_chat(qwen, own),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

// SmolLM2's file: ChatML with its default system message; the markers are single control tokens,
// no BOS is added (add_bos_token is false) and the turn ends at <|im_end|>, which is also EOS.
TEST(ChatTemplate, SmolLM2RendersThroughItsOwnTemplate) {
  const Model& model = test::smollm2();
  const ChatTemplate chat = chat_template_of(model.file());
  ASSERT_EQ(chat.format, ChatFormat::chatml);
  EXPECT_EQ(chat.default_system, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  const ChatMessage user{"user", "Hi"};
  const std::string text = render_chat(chat, std::span(&user, 1));
  const std::vector<int32_t> ids = encode_chat(model.tokenizer(), chat.format, text);
  const auto im_start = model.tokenizer().find_token("<|im_start|>"),
             im_end = model.tokenizer().find_token("<|im_end|>");
  ASSERT_TRUE(im_start && im_end);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), *im_start);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *im_start), 3);  // system, user, assistant
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *im_end), 2);
  // The same ids as the tokenizer's own parsing of the special tokens.
  EXPECT_EQ(ids, model.tokenizer().encode(text, true, true));
  EXPECT_EQ(end_of_turn(model.tokenizer(), chat.format), im_end);
  EXPECT_TRUE(model.tokenizer().is_end_of_generation(*im_end));
  EXPECT_TRUE(model.tokenizer().is_end_of_generation(*model.tokenizer().find_token("<|endoftext|>")));
  EXPECT_FALSE(model.tokenizer().is_end_of_generation(*im_start));
}

}  // namespace
}  // namespace squeezekv
