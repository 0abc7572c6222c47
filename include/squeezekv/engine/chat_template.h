// Chat messages to a prompt. The GGUF's tokenizer.chat_template is a Jinja program; rather than run
// Jinja, the two common families are recognised by their markers (Llama 3's header tokens, ChatML's
// <|im_start|> as in SmolLM2 and Qwen2) and rendered by hand, with the system message the template
// adds to a conversation that has none. Anything else gets the plain fallback. Used by `serve` and
// `generate --chat`.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "squeezekv/engine/gguf_reader.h"
#include "squeezekv/engine/tokenizer.h"

namespace squeezekv {

enum class ChatFormat {
  llama3,  // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
  chatml,  // <|im_start|>role\ncontent<|im_end|>\n
  gemma,  // <start_of_turn>user\ncontent<end_of_turn>\n (assistant is "model"; a system message opens the first user turn)
  plain,  // "role: content\n" per message, then "assistant:"
};

struct ChatMessage {
  std::string role;
  std::string content;
};

struct ChatTemplate {
  ChatFormat format = ChatFormat::plain;
  // The system message the template puts first when a conversation starts without one (SmolLM2's
  // "You are a helpful AI assistant named SmolLM, ..."); empty when it adds none.
  std::string default_system;
};

// From the template text (empty: no template in the file).
ChatFormat detect_chat_format(std::string_view chat_template);
ChatTemplate parse_chat_template(std::string_view chat_template);
// The model file's tokenizer.chat_template (plain when it has none).
ChatTemplate chat_template_of(const GgufFile& file);
std::string_view chat_format_name(ChatFormat format);

// The conversation with the assistant's turn opened, as text (markers included).
std::string render_chat(const ChatTemplate& chat, std::span<const ChatMessage> messages);

// Token ids of a rendered prompt: BOS where the model asks for one, and the markers (every control
// or user-defined token the text spells) as their single tokens, as llama-server tokenizes a
// templated prompt; a plain prompt is encoded as text. A memo spares re-encoding the messages of a
// conversation that is sent again (Tokenizer::encode).
std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, ChatFormat format, std::string_view text,
                                 FragmentMemo* memo = nullptr);

// The token that ends the assistant's turn in this format, when the vocabulary has it: generation
// stops there as at EOS.
std::optional<int32_t> end_of_turn(const Tokenizer& tokenizer, ChatFormat format);

}  // namespace squeezekv
