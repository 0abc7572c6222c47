// GPT-2 byte-level BPE ("gpt2" vocabularies), as llama.cpp's llm_tokenizer_bpe: a PCRE2 regex
// splits the text into words, each word's bytes are spelled with GPT-2's printable characters,
// and the adjacent pair of lowest merge rank is merged until none is left (ties: leftmost).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "engine/symbol_merge.h"
#include "engine/tokenizer_util.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/base/quote.h"
#include "squeezekv/engine/tokenizer.h"

namespace squeezekv {

namespace tokenizer_util {

namespace {

// GPT-2's table: printable Latin-1 bytes stand for themselves, the other 68 bytes for
// U+0100.. in byte order. `to_text[b]` is the UTF-8 text of byte b; `to_byte` inverts it.
struct ByteTable {
  std::string to_text[256];
  std::unordered_map<uint32_t, uint8_t> to_byte;

  ByteTable() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      uint32_t cp = printable ? b : next++;
      to_text[b] = encode(cp);
      to_byte.emplace(cp, static_cast<uint8_t>(b));
    }
  }

  static std::string encode(uint32_t cp) {  // code points < 0x800 only
    if (cp < 0x80) return std::string(1, static_cast<char>(cp));
    return {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
  }
};

const ByteTable& table() {
  static const ByteTable t;
  return t;
}

}  // namespace

std::string_view byte_to_unicode(uint8_t b) { return table().to_text[b]; }

void append_unicode_bytes(std::string_view text, std::string& out) {
  const ByteTable& t = table();
  for (size_t i = 0; i < text.size();) {
    auto b0 = static_cast<unsigned char>(text[i]);
    size_t len = std::min(utf8_len(b0), text.size() - i);
    uint32_t cp = b0;
    if (len == 2) cp = ((b0 & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu);
    auto it = len <= 2 ? t.to_byte.find(cp) : t.to_byte.end();
    if (it != t.to_byte.end()) {
      out += static_cast<char>(it->second);
    } else {
      out.append(text.substr(i, len));
    }
    i += len;
  }
}

}  // namespace tokenizer_util

namespace {

// Pre-tokenizer regexes, as llama.cpp and the Hugging Face tokenizer configs define them.
constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kDigitRegex = R"(\p{N})";
constexpr const char* kQwen2Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace

// One or more regexes applied in turn, as llama.cpp's unicode_regex_split: each splits every piece
// the previous one left (matches and the text between them), seeing only that piece.
class Tokenizer::Pretokenizer {
 public:
  explicit Pretokenizer(std::initializer_list<const char*> patterns) {
    for (const char* pattern : patterns) {
      int error = 0;
      PCRE2_SIZE offset = 0;
      pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
      if (!code) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(error, message, sizeof message);
        throw Error("tokenizer: cannot compile the pre-tokenizer regex: " +
                    std::string(reinterpret_cast<const char*>(message)));
      }
      codes_.push_back(code);
      pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional: the interpreter is the fallback
    }
  }
  ~Pretokenizer() {
    for (pcre2_code* code : codes_) pcre2_code_free(code);
  }
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Calls word(piece) for consecutive pieces covering all of text.
  template <typename F>
  void split(std::string_view text, F&& word) const {
    split_with(0, text, word);
  }

 private:
  // The pieces of regex `level` in text (its matches, and whatever lies between them: invalid
  // UTF-8 the regex cannot match), each split further by the regexes after it.
  template <typename F>
  void split_with(size_t level, std::string_view text, F& word) const {
    if (level == codes_.size()) return word(text);
    pcre2_code* code = codes_[level];
    std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match(
        pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
    if (!match) throw Error("tokenizer: out of memory for the regex match data");
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;
    while (pos < text.size()) {
      int rc = pcre2_match(code, subject, text.size(), pos, 0, match.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) throw Error("tokenizer: regex match failed with PCRE2 error " + std::to_string(rc));
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match.get());
      size_t begin = ov[0];
      size_t end = ov[1];
      if (begin > pos) split_with(level + 1, text.substr(pos, begin - pos), word);
      if (end == begin) end = begin + 1;  // an empty match cannot happen with these patterns; never loop
      split_with(level + 1, text.substr(begin, end - begin), word);
      pos = end;
    }
    if (pos < text.size()) split_with(level + 1, text.substr(pos), word);
  }

  std::vector<pcre2_code*> codes_;
};

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

void Tokenizer::init_bpe(const GgufFile& file) {
  std::string_view pre = file.find_string("tokenizer.ggml.pre").value_or("default");
  if (pre == "default" || pre == "gpt2" || pre == "gpt-2") {
    pretokenizer_ = std::make_shared<const Pretokenizer>(std::initializer_list<const char*>{kGpt2Regex});
  } else if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe") {
    pretokenizer_ = std::make_shared<const Pretokenizer>(std::initializer_list<const char*>{kLlama3Regex});
    ignore_merges_ = true;
  } else if (pre == "qwen2") {
    pretokenizer_ = std::make_shared<const Pretokenizer>(std::initializer_list<const char*>{kQwen2Regex});
  } else if (pre == "smollm" || pre == "starcoder") {
    // Every digit a word of its own, then GPT-2's split (Hugging Face's Digits(individual_digits)).
    pretokenizer_ = std::make_shared<const Pretokenizer>(std::initializer_list<const char*>{kDigitRegex, kGpt2Regex});
  } else {
    throw FormatError("tokenizer: key 'tokenizer.ggml.pre' = " + quoted_excerpt(pre) +
                      ": unsupported pre-tokenizer (supported: default, gpt2, llama3, "
                      "llama-v3, llama-bpe, qwen2, smollm, starcoder)");
  }

  // "left right" -> rank; rules whose parts or result are not tokens can never apply.
  auto merges = file.get_strings("tokenizer.ggml.merges");
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    std::string_view rule = merges[rank];
    size_t space = rule.find(' ', 1);
    if (space == std::string_view::npos) {
      throw FormatError("tokenizer: key 'tokenizer.ggml.merges' [" + std::to_string(rank) +
                        "] = " + quoted_excerpt(rule) + ": expected two tokens separated by a space");
    }
    std::string_view left = rule.substr(0, space);
    std::string_view right = rule.substr(space + 1);
    auto l = ids_.find(left);
    auto r = ids_.find(right);
    auto m = ids_.find(std::string(left) + std::string(right));
    if (l == ids_.end() || r == ids_.end() || m == ids_.end()) continue;
    uint64_t key = static_cast<uint64_t>(l->second) << 32 | static_cast<uint32_t>(r->second);
    merges_.emplace(key, std::pair{static_cast<int32_t>(rank), m->second});  // first rank wins
  }
}

void Tokenizer::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
  std::string mapped;
  pretokenizer_->split(text, [&](std::string_view word) {
    mapped.clear();
    for (char c : word) mapped += tokenizer_util::byte_to_unicode(static_cast<uint8_t>(c));
    bpe_word(mapped, out);
  });
}

void Tokenizer::bpe_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto it = ids_.find(word); it != ids_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<tokenizer_util::MergeSymbol> symbols = tokenizer_util::utf8_symbols(word, [this](std::string_view c) {
    const auto it = ids_.find(c);
    return it == ids_.end() ? int32_t(-1) : it->second;
  });
  // A pair of known tokens merges by its rule, the lowest rank first.
  tokenizer_util::merge_symbols(
      symbols,
      [this](const tokenizer_util::MergeSymbol& l,
             const tokenizer_util::MergeSymbol& r) -> std::optional<tokenizer_util::PairMerge> {
        if (l.id < 0 || r.id < 0) return std::nullopt;
        const auto it = merges_.find(static_cast<uint64_t>(l.id) << 32 | static_cast<uint32_t>(r.id));
        if (it == merges_.end()) return std::nullopt;
        return tokenizer_util::PairMerge{-double(it->second.first), it->second.second};
      });

  for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    const tokenizer_util::MergeSymbol& s = symbols[static_cast<size_t>(i)];
    if (s.id >= 0) {
      out.push_back(s.id);
    } else if (unk_) {
      out.push_back(*unk_);  // a character the vocabulary cannot spell
    }
  }
}

}  // namespace squeezekv
