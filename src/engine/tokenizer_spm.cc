// SentencePiece-style encoding ("llama" vocabularies), as llama.cpp's llm_tokenizer_spm: start
// from UTF-8 characters, repeatedly merge the adjacent pair whose concatenation is the
// highest-scoring vocabulary token (ties: leftmost), and spell leftovers as <0xXX> byte tokens.
// The merge loop is the BPE tokenizer's too (engine/symbol_merge.h).
#include <optional>
#include <string>
#include <vector>

#include "engine/symbol_merge.h"
#include "squeezekv/engine/tokenizer.h"

namespace squeezekv {

void Tokenizer::encode_spm(std::string_view raw, std::vector<int32_t>& out) const {
  if (raw.empty()) return;
  // Prepend a space, then spell every space as U+2581.
  std::string text;
  text.reserve(raw.size() + raw.size() / 4 + 3);
  auto put = [&text](char c) {
    if (c == ' ') {
      text += "\xE2\x96\x81";
    } else {
      text += c;
    }
  };
  if (add_space_prefix_) put(' ');
  for (char c : raw) put(c);

  auto id_of = [this](std::string_view piece) {
    const auto it = ids_.find(piece);
    return it == ids_.end() ? int32_t(-1) : it->second;
  };
  std::vector<tokenizer_util::MergeSymbol> symbols = tokenizer_util::utf8_symbols(text, id_of);
  // A pair merges when its text is a token, the higher-scoring first.
  tokenizer_util::merge_symbols(symbols,
                                [&](const tokenizer_util::MergeSymbol& l,
                                    const tokenizer_util::MergeSymbol& r) -> std::optional<tokenizer_util::PairMerge> {
                                  const int32_t id = id_of(std::string_view(text.data() + l.start, l.len + r.len));
                                  if (id < 0) return std::nullopt;
                                  return tokenizer_util::PairMerge{scores_[static_cast<size_t>(id)], id};
                                });

  for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    const tokenizer_util::MergeSymbol& s = symbols[static_cast<size_t>(i)];
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    const std::string_view piece(text.data() + s.start, s.len);
    for (char c : piece) {  // byte fallback
      int32_t id = byte_ids_[static_cast<unsigned char>(c)];
      if (id >= 0) {
        out.push_back(id);
      } else if (unk_) {
        out.push_back(*unk_);
      }
    }
  }
}

}  // namespace squeezekv
