#include "squeezekv/engine/chat_template.h"

namespace squeezekv {

ChatFormat detect_chat_format(std::string_view t) {
  if (t.find("<|start_header_id|>") != std::string_view::npos && t.find("<|eot_id|>") != std::string_view::npos) {
    return ChatFormat::llama3;
  }
  if (t.find("<|im_start|>") != std::string_view::npos) return ChatFormat::chatml;
  if (t.find("<start_of_turn>") != std::string_view::npos) return ChatFormat::gemma;
  return ChatFormat::plain;
}

namespace {

// The text of a ChatML system turn the template writes as one literal, "<|im_start|>system\n" then
// plain text up to "<|im_end|>" (SmolLM2's and Qwen2's defaults); a turn built from the messages
// ("... system\n' + messages[0]['content']") is skipped. The newline may be written as an escape.
std::string chatml_default_system(std::string_view t) {
  constexpr std::string_view open = "<|im_start|>system", close = "<|im_end|>";
  for (size_t at = t.find(open); at != std::string_view::npos; at = t.find(open, at + 1)) {
    size_t from = at + open.size();
    if (t.compare(from, 1, "\n") == 0) {
      from += 1;
    } else if (t.compare(from, 2, "\\n") == 0) {
      from += 2;
    } else {
      continue;
    }
    const size_t end = t.find(close, from);
    if (end == std::string_view::npos) break;
    const std::string_view text = t.substr(from, end - from);
    if (text.empty() || text.find_first_of("'\"{}\\\n") != std::string_view::npos) continue;
    return std::string(text);
  }
  return {};
}

}  // namespace

ChatTemplate parse_chat_template(std::string_view t) {
  ChatTemplate chat;
  chat.format = detect_chat_format(t);
  if (chat.format == ChatFormat::chatml) chat.default_system = chatml_default_system(t);
  return chat;
}

ChatTemplate chat_template_of(const GgufFile& file) {
  const auto text = file.find_string("tokenizer.chat_template");
  // Gemma 3 files may come without their template (the 270M base model's has none): its turns.
  if (!text && file.find_string("general.architecture") == "gemma3") return ChatTemplate{ChatFormat::gemma, {}};
  return parse_chat_template(text ? *text : std::string_view());
}

std::string_view chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::llama3:
      return "llama3";
    case ChatFormat::chatml:
      return "chatml";
    case ChatFormat::gemma:
      return "gemma";
    case ChatFormat::plain:
      break;
  }
  return "plain";
}

std::string render_chat(const ChatTemplate& chat, std::span<const ChatMessage> messages) {
  std::string out;
  const auto append = [&](const ChatMessage& m) {
    switch (chat.format) {
      case ChatFormat::llama3:
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
        break;
      case ChatFormat::chatml:
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
        break;
      case ChatFormat::gemma:
        out += "<start_of_turn>" + std::string(m.role == "assistant" ? "model" : m.role) + "\n" + m.content +
               "<end_of_turn>\n";
        break;
      case ChatFormat::plain:
        out += m.role + ": " + m.content + "\n";
        break;
    }
  };
  if (chat.format == ChatFormat::gemma) {
    // Gemma has no system role: its template puts the system text at the head of the first user turn.
    std::string system;
    for (const ChatMessage& m : messages) {
      if (m.role == "system") {
        system += m.content + "\n\n";
      } else if (m.role == "user" && !system.empty()) {
        append(ChatMessage{m.role, system + m.content});
        system.clear();
      } else {
        append(m);
      }
    }
    if (!system.empty()) append(ChatMessage{"user", system.substr(0, system.size() - 2)});
    return out + "<start_of_turn>model\n";
  }
  if (!chat.default_system.empty() && (messages.empty() || messages[0].role != "system")) {
    append(ChatMessage{"system", chat.default_system});
  }
  for (const ChatMessage& m : messages) append(m);
  switch (chat.format) {
    case ChatFormat::llama3:
      out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatFormat::chatml:
      out += "<|im_start|>assistant\n";
      break;
    case ChatFormat::plain:
      out += "assistant:";
      break;
    case ChatFormat::gemma:
      break;  // returned above
  }
  return out;
}

std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, ChatFormat format, std::string_view text,
                                 FragmentMemo* memo) {
  // Plain: exactly what `generate -p TEXT` encodes. Otherwise the rendered markers are special
  // tokens, parsed as llama-server parses a templated prompt.
  return tokenizer.encode(text, true, format != ChatFormat::plain, memo);
}

std::optional<int32_t> end_of_turn(const Tokenizer& tokenizer, ChatFormat format) {
  switch (format) {
    case ChatFormat::llama3:
      return tokenizer.find_token("<|eot_id|>");
    case ChatFormat::chatml:
      return tokenizer.find_token("<|im_end|>");
    case ChatFormat::gemma:
      return tokenizer.find_token("<end_of_turn>");
    case ChatFormat::plain:
      break;
  }
  return std::nullopt;
}

}  // namespace squeezekv
