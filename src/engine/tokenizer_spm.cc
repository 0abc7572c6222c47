// SentencePiece-style encoding ("llama" vocabularies), as llama.cpp's llm_tokenizer_spm: start
// from UTF-8 characters, repeatedly merge the adjacent pair whose concatenation is the
// highest-scoring vocabulary token (ties: leftmost), and spell leftovers as <0xXX> byte tokens.
// Symbols form a linked list over the text and candidate pairs a priority queue, so the whole
// encoding is O(n log n); a symbol's text is always one contiguous slice of the input.
#include <queue>
#include <string>
#include <vector>

#include "engine/tokenizer_util.h"
#include "squeezekv/engine/tokenizer.h"

namespace squeezekv {

namespace {

struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t start;
  uint32_t len;  // 0 once merged into its left neighbour
};

struct Bigram {
  float score;
  int32_t left;
  uint32_t len;  // length of the merged text when queued; stale entries no longer match

  // Priority: higher score first, then the leftmost pair.
  bool operator<(const Bigram& o) const { return score < o.score || (score == o.score && left > o.left); }
};

}  // namespace

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

  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t len = std::min(tokenizer_util::utf8_len(static_cast<unsigned char>(text[i])), text.size() - i);
    auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{index - 1, index + 1, static_cast<uint32_t>(i), static_cast<uint32_t>(len)});
    i += len;
  }
  symbols.back().next = -1;

  std::priority_queue<Bigram> queue;
  auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    std::string_view merged(text.data() + l.start, l.len + r.len);
    auto it = ids_.find(merged);
    if (it == ids_.end()) return;
    queue.push(Bigram{scores_[static_cast<size_t>(it->second)], left, l.len + r.len});
  };
  for (size_t i = 1; i < symbols.size(); ++i) {
    try_pair(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  }

  while (!queue.empty()) {
    Bigram top = queue.top();
    queue.pop();
    Symbol& l = symbols[static_cast<size_t>(top.left)];
    if (l.len == 0 || l.next < 0) continue;
    Symbol& r = symbols[static_cast<size_t>(l.next)];
    if (r.len == 0 || l.len + r.len != top.len) continue;  // stale: a neighbour changed
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = top.left;
    try_pair(l.prev, top.left);
    try_pair(top.left, l.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    std::string_view piece(text.data() + s.start, s.len);
    if (auto it = ids_.find(piece); it != ids_.end()) {
      out.push_back(it->second);
      continue;
    }
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
