// The merge loop both tokenizers share (tokenizer_spm.cc, tokenizer_bpe.cc): a word starts as its
// UTF-8 characters, a linked list of symbols over the text; the adjacent pair the vocabulary
// rates best is merged, ties to the leftmost, until no pair merges. Candidate pairs wait in a
// priority queue, so a word of n characters takes O(n log n). SentencePiece rates a pair by the
// score of the token its text spells, BPE by its merge rank (lower first).
#pragma once

#include <cstdint>
#include <optional>
#include <queue>
#include <string_view>
#include <vector>

#include "engine/tokenizer_util.h"

namespace squeezekv::tokenizer_util {

struct MergeSymbol {
  int32_t id;  // token id, -1 when the vocabulary has no token for its text
  int32_t prev;
  int32_t next;
  uint32_t start;  // its text: one contiguous slice of the word
  uint32_t len;    // 0 once merged into its left neighbour
};

// What a pair merges into: how good the merge is (higher first) and the merged symbol's id.
struct PairMerge {
  double priority;
  int32_t id;
};

// The word's characters as symbols, each with id_of(its text).
template <class IdOf>
std::vector<MergeSymbol> utf8_symbols(std::string_view word, const IdOf& id_of) {
  std::vector<MergeSymbol> symbols;
  symbols.reserve(word.size());
  for (size_t i = 0; i < word.size();) {
    const size_t len = std::min(utf8_len(static_cast<unsigned char>(word[i])), word.size() - i);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back(MergeSymbol{id_of(word.substr(i, len)), index - 1, index + 1, static_cast<uint32_t>(i),
                                  static_cast<uint32_t>(len)});
    i += len;
  }
  if (!symbols.empty()) symbols.back().next = -1;
  return symbols;
}

// Merges adjacent symbols while merge_of(left, right) gives a PairMerge for some pair; the
// survivors stay linked from symbols[0].
template <class MergeOf>
void merge_symbols(std::vector<MergeSymbol>& symbols, const MergeOf& merge_of) {
  struct Candidate {
    double priority;
    int32_t left;
    int32_t left_id, right_id;
    uint32_t len;  // of the merged text when queued: with the ids it tells a stale entry
    int32_t id;
    // Higher priority first, then the leftmost pair.
    bool operator<(const Candidate& o) const {
      return priority < o.priority || (priority == o.priority && left > o.left);
    }
  };
  std::priority_queue<Candidate> queue;
  auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const MergeSymbol& l = symbols[static_cast<size_t>(left)];
    const MergeSymbol& r = symbols[static_cast<size_t>(right)];
    const std::optional<PairMerge> m = merge_of(l, r);
    if (m) queue.push(Candidate{m->priority, left, l.id, r.id, l.len + r.len, m->id});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_pair(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    MergeSymbol& l = symbols[static_cast<size_t>(top.left)];
    if (l.len == 0 || l.next < 0 || l.id != top.left_id) continue;
    MergeSymbol& r = symbols[static_cast<size_t>(l.next)];
    // Stale: a neighbour merged since the pair was queued.
    if (r.len == 0 || r.id != top.right_id || l.len + r.len != top.len) continue;
    l.id = top.id;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = top.left;
    try_pair(l.prev, top.left);
    try_pair(top.left, l.next);
  }
}

}  // namespace squeezekv::tokenizer_util
