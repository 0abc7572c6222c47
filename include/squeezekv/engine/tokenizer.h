// Tokenizer built from a GGUF file's tokenizer.ggml.* keys: SentencePiece-style merging by score
// with byte fallback ("llama"), or GPT-2 byte-level BPE with a regex pre-tokenizer ("gpt2").
// Both follow llama.cpp, so that token ids match the reference implementation.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "squeezekv/engine/fragment_memo.h"
#include "squeezekv/engine/gguf_reader.h"

namespace squeezekv {

enum class TokenizerModel { spm, bpe };

// tokenizer.ggml.token_type values (as llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.model ("llama" or "gpt2"), tokens, scores, token_type, merges, pre and
  // the special ids; FormatError naming the key when one is missing or inconsistent.
  explicit Tokenizer(const GgufFile& file);
  // Move-only: the lookup table holds views into the token strings.
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  ~Tokenizer();

  TokenizerModel model() const { return model_; }
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  std::optional<int32_t> bos() const { return bos_; }  // nullopt when unset (4294967295)
  std::optional<int32_t> eos() const { return eos_; }
  std::optional<int32_t> unk() const { return unk_; }
  bool add_bos_default() const { return add_bos_; }  // tokenizer.ggml.add_bos_token
  // Whether generation ends at this token, as llama.cpp's llama_vocab_is_eog: EOS, and the control
  // tokens that end a turn or a text ("<|im_end|>", "<|endoftext|>", "<end_of_turn>", ...).
  bool is_end_of_generation(int32_t id) const;

  // Token ids of `text`, as llama.cpp's llama_tokenize: with add_special, BOS first when the model
  // asks for one (tokenizer.ggml.add_bos_token, and a BOS id is set). User-defined tokens spelled
  // in the text always become their own ids; with parse_special, control tokens too ("<|im_end|>"
  // as one token), otherwise their spelling is encoded as text. Where spellings overlap, longer
  // special tokens are split out first. With a memo, raw fragments it holds are not encoded again
  // and the others are added to it (the ids are the same either way).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special = false,
                              FragmentMemo* memo = nullptr) const;

  // Text of a whole sequence: byte tokens become raw bytes, control tokens vanish; for "llama"
  // the space prepended by encode is removed again, so decode(encode(s)) == s.
  std::string decode(std::span<const int32_t> ids) const;
  // Bytes of one token, for streaming output (no leading-space removal). InvalidArgument naming
  // the id when it is out of range, as for decode.
  std::string piece(int32_t id) const;

  std::string_view token_text(int32_t id) const;  // as stored in the vocabulary
  TokenType token_type(int32_t id) const;
  std::optional<int32_t> find_token(std::string_view text) const;

 private:
  class Pretokenizer;  // PCRE2 regex of the BPE pre-tokenizer

  void check_id(int32_t id) const;
  void encode_spm(std::string_view text, std::vector<int32_t>& out) const;
  void encode_bpe(std::string_view text, std::vector<int32_t>& out) const;
  void bpe_word(std::string_view word, std::vector<int32_t>& out) const;
  void init_bpe(const GgufFile& file);
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;  // one fragment

  TokenizerModel model_ = TokenizerModel::spm;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  std::unordered_map<std::string_view, int32_t> ids_;  // views into tokens_
  std::optional<int32_t> bos_, eos_, unk_;
  // Control, user-defined and unknown tokens with a spelling, longest first (ties: lower id first):
  // the order in which encode splits them out of the text.
  std::vector<int32_t> special_ids_;
  std::vector<int32_t> end_ids_;  // is_end_of_generation's tokens, sorted
  bool add_bos_ = true;
  bool add_space_prefix_ = true;       // spm: prepend " " before encoding
  std::array<int32_t, 256> byte_ids_;  // spm: <0xXX> tokens (-1 when absent)
  // bpe: (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  bool ignore_merges_ = false;                        // bpe (llama3): a word that is a whole token is not merged
  std::shared_ptr<const Pretokenizer> pretokenizer_;  // shared_ptr: fine with an incomplete type
};

}  // namespace squeezekv
