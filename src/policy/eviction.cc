#include "policy/eviction.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace squeezekv {

Protection cumulative_protection(int64_t tokens_seen, int budget, int n_sink, double recent) {
  const auto recent_rows = static_cast<int64_t>(recent * double(std::max(0, budget - n_sink)));
  return Protection{n_sink, tokens_seen - recent_rows};
}

namespace {

// The lowest of a set of slots by (score, position): a running minimum that takes a candidate
// by a select, not a branch (free slots lie among live ones at random in KIVI stores).
struct Lowest {
  int slot = -1;
  float score = std::numeric_limits<float>::infinity();
  int64_t pos = std::numeric_limits<int64_t>::max();

  void offer(bool eligible, int s, float sc, int64_t p) {
    const bool take = eligible & ((sc < score) | ((sc == score) & (p < pos)));
    slot = take ? s : slot;
    score = take ? sc : score;
    pos = take ? p : pos;
  }
};

// The unprotected live slot lowest by (score, position), -1 if none: select_lowest_into's order
// in one pass (live positions are distinct, so the lowest is unique). Four running minima over
// interleaved slots keep four independent chains in flight, merged at the end.
int lowest_slot(const HeadStore& head, Protection protect, const float* scores) {
  const int64_t* pos = head.positions();
  const int n = head.n_slots();
  Lowest lanes[4];
  auto offer = [&](Lowest& lane, int s) {
    const int64_t p = pos[s];
    lane.offer((p != HeadStore::kFree) & !protect.covers(p), s, scores ? scores[s] : 0.0f, p);
  };
  int s = 0;
  for (; s + 4 <= n; s += 4) {
    for (int i = 0; i < 4; ++i) offer(lanes[i], s + i);
  }
  for (; s < n; ++s) offer(lanes[0], s);
  for (int i = 1; i < 4; ++i) lanes[0].offer(lanes[i].slot >= 0, lanes[i].slot, lanes[i].score, lanes[i].pos);
  return lanes[0].slot;
}

}  // namespace

void select_lowest_into(const HeadStore& head, int budget, Protection protect, const float* scores,
                        std::vector<int>& candidates, std::vector<int>& out) {
  out.clear();
  const int excess = head.n_live() - budget;
  if (excess <= 0) return;
  const int64_t* pos = head.positions();
  if (excess == 1) {  // a decode step: one pass, no candidate list
    const int best = lowest_slot(head, protect, scores);
    if (best >= 0) out.push_back(best);
    return;
  }
  // Branch-free: KIVI's held rows scatter free slots among live ones, where a branch per slot
  // mispredicts; every slot is written and the count advances only for a candidate.
  candidates.resize(size_t(head.n_slots()));
  size_t n = 0;
  for (int s = 0; s < head.n_slots(); ++s) {
    candidates[n] = s;
    n += size_t((pos[s] != HeadStore::kFree) & !protect.covers(pos[s]));
  }
  candidates.resize(n);
  auto lower = [&](int a, int b) {
    if (scores && scores[a] != scores[b]) return scores[a] < scores[b];
    return pos[a] < pos[b];
  };
  if (size_t(excess) >= candidates.size()) {
    out.assign(candidates.begin(), candidates.end());
    return;
  }
  std::nth_element(candidates.begin(), candidates.begin() + excess, candidates.end(), lower);
  out.assign(candidates.begin(), candidates.begin() + excess);
}

std::vector<int> select_lowest(const HeadStore& head, int budget, Protection protect, const float* scores) {
  std::vector<int> candidates, out;
  candidates.reserve(size_t(head.n_live()));
  select_lowest_into(head, budget, protect, scores, candidates, out);
  return out;
}

void evict_lowest(HeadStore& head, int budget, Protection protect, const float* scores) {
  if (head.n_live() <= budget) return;
  // Per thread, kept across calls: the decode step's eviction allocates nothing.
  thread_local std::vector<int> candidates, out;
  select_lowest_into(head, budget, protect, scores, candidates, out);
  evict_slots(head, out);
}

void evict_lowest_scored(HeadStore& head, int budget, Protection protect) {
  int scored = 0;
  for (int s = 0; s < head.n_slots(); ++s) scored += head.live(s) && !std::isnan(head.scores()[s]) ? 1 : 0;
  if (scored <= budget) return;
  // Unscored rows count as kept (+inf) for this eviction: the rest go down to the budget.
  thread_local std::vector<float> priorities;
  priorities.assign(head.scores(), head.scores() + head.n_slots());
  for (float& p : priorities) {
    if (std::isnan(p)) p = std::numeric_limits<float>::infinity();
  }
  evict_lowest(head, budget + (head.n_live() - scored), protect, priorities.data());
}

void evict_slots(HeadStore& head, std::span<const int> slots) {
  for (int s : slots) head.evict(s);
}

namespace {

// The decayed accumulation of one query's probabilities into the head's scores.
void add_probs(HeadStore& head, const float* probs, const uint8_t* mask, int n_slots, float decay) {
  float* scores = head.scores();
  if (decay == 1.0f) {
    for (int s = 0; s < n_slots; ++s) scores[s] += probs[s];
  } else {
    for (int s = 0; s < n_slots; ++s) {
      if (mask[s]) scores[s] = decay * scores[s] + probs[s];
    }
  }
}

}  // namespace

void accumulate_key_proxy(LayerRows& layer, const UpdateRows& update, float decay, KeyProxyScratch& scratch) {
  const int dim = layer.head_dim();
  const float inv_sqrt_d = 1.0f / std::sqrt(float(dim));
  for (size_t h = 0; h < layer.heads.size(); ++h) {
    HeadStore& head = layer.heads[h];
    const int n_slots = head.n_slots();
    const int64_t* pos = head.positions();
    const float* keys = update.keys + h * size_t(update.n_new) * size_t(dim);
    scratch.mask.resize(size_t(n_slots));
    if (update.n_new == 1) {
      // Decode: one query against every row.
      scratch.logits.resize(size_t(n_slots));
      for (int s = 0; s < n_slots; ++s)
        scratch.mask[size_t(s)] = pos[s] != HeadStore::kFree && pos[s] < update.first_pos;
      if (!head.key_probs(keys, 1, size_t(dim), size_t(n_slots), scratch.mask.data(), inv_sqrt_d, scratch.logits.data(),
                          size_t(n_slots))) {
        head.scores()[update.slots[h][0]] = 1.0f;
      } else {
        add_probs(head, scratch.logits.data(), scratch.mask.data(), n_slots, decay);
      }
      continue;
    }
    // Prefill: keys transposed once (f32 [dim][ld]) so blocks of queries run as a small GEMM.
    const size_t ld = transposed_keys_stride(size_t(n_slots));
    scratch.kt.assign(size_t(dim) * ld, 0.0f);
    std::vector<float> row(static_cast<size_t>(dim));
    for (int s = 0; s < n_slots; ++s) {
      if (pos[s] == HeadStore::kFree) continue;
      head.load_key(s, row.data());
      for (int d = 0; d < dim; ++d) scratch.kt[size_t(d) * ld + size_t(s)] = row[size_t(d)];
    }
    constexpr int kBlock = 32;
    scratch.logits.resize(size_t(kBlock) * ld);
    // Queries pre-scaled by 1 / sqrt(D) so the logits come out of the kernel ready for softmax.
    scratch.queries.resize(size_t(update.n_new) * size_t(dim));
    for (size_t i = 0; i < scratch.queries.size(); ++i) scratch.queries[i] = keys[i] * inv_sqrt_d;
    for (int t0 = 0; t0 < update.n_new; t0 += kBlock) {
      const int m = std::min(kBlock, update.n_new - t0);
      // Only slots up to the highest one present for the block's last query can be attended.
      int hi = 0;
      for (int t = 0; t < t0 + m; ++t) hi = std::max(hi, update.slots[h][size_t(t)] + 1);
      for (int s = 0; s < n_slots; ++s) {
        if (pos[s] != HeadStore::kFree && pos[s] < update.first_pos) hi = std::max(hi, s + 1);
      }
      query_block_dots(scratch.queries.data() + size_t(t0) * size_t(dim), size_t(m), size_t(dim), scratch.kt.data(), ld,
                       size_t(hi), size_t(dim), scratch.logits.data(), ld);
      for (int i = 0; i < m; ++i) {
        const int64_t query_pos = update.first_pos + t0 + i;
        float* logits = scratch.logits.data() + size_t(i) * ld;
        bool any = false;
        for (int s = 0; s < hi; ++s) {
          scratch.mask[size_t(s)] = pos[s] != HeadStore::kFree && pos[s] < query_pos;
          any |= scratch.mask[size_t(s)] != 0;
        }
        if (!any) head.scores()[update.slots[h][size_t(t0 + i)]] = 1.0f;
        else if (masked_softmax(logits, scratch.mask.data(), size_t(hi)))
          add_probs(head, logits, scratch.mask.data(), hi, decay);
      }
    }
  }
}

void accumulate_attention(HeadStore& head, const float* probs, int n_queries, int n_slots, float decay) {
  float* scores = head.scores();
  const int64_t* pos = head.positions();
  for (int q = 0; q < n_queries; ++q) {
    const float* p = probs + size_t(q) * size_t(n_slots);
    if (decay == 1.0f) {
      for (int s = 0; s < n_slots; ++s) scores[s] += p[s];
    } else {
      // A select, not a branch: free slots (KIVI's held rows) sit among live ones at random.
      for (int s = 0; s < n_slots; ++s) {
        const float decayed = decay * scores[s] + p[s];
        scores[s] = pos[s] != HeadStore::kFree ? decayed : scores[s];
      }
    }
  }
}

}  // namespace squeezekv
