// Tokenizer: vocabulary, special ids, decoding. Encoding lives in tokenizer_spm.cc and
// tokenizer_bpe.cc.
#include "squeezekv/engine/tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "engine/tokenizer_util.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/base/quote.h"

namespace squeezekv {

namespace {

constexpr uint32_t kUnset = 4294967295u;
const std::string kSpace = "\xE2\x96\x81";    // U+2581, SentencePiece's visible space
const std::string kUnknown = "\xE2\x96\x85";  // U+2585, how llama.cpp prints <unk>

std::string key_error(std::string_view key, const std::string& why) {
  return "tokenizer: key '" + std::string(key) + "' " + why;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The byte a "<0xXX>" token stands for, or -1.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return -1;
  int hi = hex_digit(text[3]);
  int lo = hex_digit(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// Tokens that end a turn or a text in the vocabularies squeezekv reads (llama.cpp's end-of-generation
// spellings for them).
constexpr std::string_view kEndSpellings[] = {"<|eot_id|>",    "<|im_end|>", "<|end|>",        "<end_of_turn>",
                                              "<|endoftext|>", "<|eom_id|>", "<|end_of_text|>"};

}  // namespace

Tokenizer::Tokenizer(const GgufFile& file) {
  std::string_view model = file.get_string("tokenizer.ggml.model");
  if (model == "llama") {
    model_ = TokenizerModel::spm;
  } else if (model == "gpt2") {
    model_ = TokenizerModel::bpe;
  } else {
    throw FormatError(
        key_error("tokenizer.ggml.model", "= " + quoted_excerpt(model) + ": unsupported (expected llama or gpt2)"));
  }

  auto texts = file.get_strings("tokenizer.ggml.tokens");
  if (texts.empty()) throw FormatError(key_error("tokenizer.ggml.tokens", "is empty"));
  if (texts.size() > static_cast<size_t>(INT32_MAX)) {
    throw FormatError(key_error("tokenizer.ggml.tokens", "has too many entries"));
  }
  const size_t n = texts.size();
  tokens_.assign(texts.begin(), texts.end());

  scores_.assign(n, 0.0f);
  if (file.has("tokenizer.ggml.scores")) {
    scores_ = file.get_f32s("tokenizer.ggml.scores");
    if (scores_.size() != n) {
      throw FormatError(key_error(
          "tokenizer.ggml.scores",
          "has " + std::to_string(scores_.size()) + " entries, expected " + std::to_string(n) + " (one per token)"));
    }
  }
  types_.assign(n, TokenType::normal);
  if (file.has("tokenizer.ggml.token_type")) {
    std::vector<int32_t> types = file.get_i32s("tokenizer.ggml.token_type");
    if (types.size() != n) {
      throw FormatError(key_error(
          "tokenizer.ggml.token_type",
          "has " + std::to_string(types.size()) + " entries, expected " + std::to_string(n) + " (one per token)"));
    }
    for (size_t i = 0; i < n; ++i) {
      if (types[i] < 0 || types[i] > static_cast<int32_t>(TokenType::byte)) {
        throw FormatError(
            key_error("tokenizer.ggml.token_type",
                      "[" + std::to_string(i) + "] = " + std::to_string(types[i]) + ": not a token type (0..6)"));
      }
      types_[i] = static_cast<TokenType>(types[i]);
    }
  }

  // Later duplicates win, as in llama.cpp's token_to_id.
  ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) ids_[tokens_[i]] = static_cast<int32_t>(i);
  for (size_t i = 0; i < n; ++i) {
    const TokenType t = types_[i];
    const bool special = t == TokenType::control || t == TokenType::user_defined || t == TokenType::unknown;
    if (special && !tokens_[i].empty()) special_ids_.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(special_ids_.begin(), special_ids_.end(), [&](int32_t a, int32_t b) {
    return tokens_[static_cast<size_t>(a)].size() > tokens_[static_cast<size_t>(b)].size();
  });

  auto special = [&](std::string_view key) -> std::optional<int32_t> {
    std::optional<uint32_t> id = file.find_u32(key);
    if (!id || *id == kUnset) return std::nullopt;
    if (*id >= n) {
      throw FormatError(key_error(key, "= " + std::to_string(*id) + ": out of range [0, " + std::to_string(n) + ")"));
    }
    return static_cast<int32_t>(*id);
  };
  bos_ = special("tokenizer.ggml.bos_token_id");
  eos_ = special("tokenizer.ggml.eos_token_id");
  unk_ = special("tokenizer.ggml.unknown_token_id");
  if (eos_) end_ids_.push_back(*eos_);
  for (std::string_view spelling : kEndSpellings) {
    if (auto it = ids_.find(spelling); it != ids_.end()) end_ids_.push_back(it->second);
  }
  std::sort(end_ids_.begin(), end_ids_.end());
  end_ids_.erase(std::unique(end_ids_.begin(), end_ids_.end()), end_ids_.end());

  if (model_ == TokenizerModel::spm) {
    add_bos_ = file.find_bool("tokenizer.ggml.add_bos_token").value_or(true);
    add_space_prefix_ = file.find_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      auto it = ids_.find(name);
      byte_ids_[static_cast<size_t>(b)] = it == ids_.end() ? -1 : it->second;
    }
  } else {
    add_bos_ = file.find_bool("tokenizer.ggml.add_bos_token").value_or(false);
    add_space_prefix_ = file.find_bool("tokenizer.ggml.add_space_prefix").value_or(false);
    byte_ids_.fill(-1);
    init_bpe(file);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special,
                                       FragmentMemo* memo) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && add_bos_ && bos_) out.push_back(*bos_);
  // The text cut into raw fragments and special tokens (llama.cpp's tokenizer_st_partition): each
  // special token in turn, longest first, is split out of every raw fragment that spells it.
  struct Fragment {
    std::string_view text;
    int32_t id;  // >= 0: a special token
  };
  std::vector<Fragment> fragments{{text, -1}}, next;
  for (const int32_t id : special_ids_) {
    if (!parse_special && types_[static_cast<size_t>(id)] != TokenType::user_defined) continue;
    const std::string& spelling = tokens_[static_cast<size_t>(id)];
    if (text.find(spelling) == std::string_view::npos) continue;  // the common case, one scan
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      size_t from = 0;
      for (size_t at; (at = f.text.find(spelling, from)) != std::string_view::npos; from = at + spelling.size()) {
        if (at > from) next.push_back({f.text.substr(from, at - from), -1});
        next.push_back({{}, id});
      }
      if (from < f.text.size()) next.push_back({f.text.substr(from), -1});
    }
    fragments.swap(next);
  }
  for (const Fragment& f : fragments) {
    if (f.id >= 0) {
      out.push_back(f.id);
    } else if (memo == nullptr) {
      encode_text(f.text, out);
    } else if (!memo->find(f.text, out)) {
      const size_t start = out.size();
      encode_text(f.text, out);
      memo->add(f.text, std::span(out).subspan(start));
    }
  }
  return out;
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  // SentencePiece prefixes every raw fragment with a space (llama.cpp: after each special token).
  if (model_ == TokenizerModel::spm) {
    encode_spm(text, out);
  } else {
    encode_bpe(text, out);
  }
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw InvalidArgument(invalid_value("token id", id, "out of range [0, " + std::to_string(vocab_size()) + ")"));
  }
}

std::string_view Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return tokens_[static_cast<size_t>(id)];
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return std::binary_search(end_ids_.begin(), end_ids_.end(), id);
}

TokenType Tokenizer::token_type(int32_t id) const {
  check_id(id);
  return types_[static_cast<size_t>(id)];
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  auto it = ids_.find(text);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

std::string Tokenizer::piece(int32_t id) const {
  check_id(id);
  const std::string& text = tokens_[static_cast<size_t>(id)];
  switch (types_[static_cast<size_t>(id)]) {
    case TokenType::control:
    case TokenType::unused:
      return {};
    case TokenType::unknown:
      return kUnknown;
    case TokenType::user_defined:
      return text;
    case TokenType::byte:
      // "<0xXX>" stands for the byte XX.
      if (int b = parse_byte_token(text); b >= 0) return std::string(1, static_cast<char>(b));
      return text;
    case TokenType::undefined:
    case TokenType::normal:
      break;
  }
  std::string out;
  if (model_ == TokenizerModel::spm) {
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      if (text.compare(i, kSpace.size(), kSpace) == 0) {
        out += ' ';
        i += kSpace.size();
      } else {
        out += text[i++];
      }
    }
  } else {
    tokenizer_util::append_unicode_bytes(text, out);
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  bool strip = model_ == TokenizerModel::spm && add_space_prefix_;
  for (int32_t id : ids) {
    std::string p = piece(id);
    if (strip && !p.empty()) {
      // Only the first text-bearing piece carries the space that encode prepended.
      if (p[0] == ' ') p.erase(0, 1);
      strip = false;
    }
    out += p;
  }
  return out;
}

}  // namespace squeezekv
