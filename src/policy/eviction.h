// The eviction loop shared by every policy, and the two ways of scoring rows (key-proxy and fed-back
// attention), written once.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "squeezekv/core/head_store.h"
#include "squeezekv/core/layer_rows.h"

namespace squeezekv {

// Rows protected from eviction: sinks (position < n_sink) and the recent window
// (position >= recent_from).
struct Protection {
  int64_t n_sink = 0;
  int64_t recent_from = INT64_MAX;
  bool covers(int64_t position) const { return position < n_sink || position >= recent_from; }
};

// The recent window of a cumulative policy: `recent` of the rows beyond the sinks, as positions.
Protection cumulative_protection(int64_t tokens_seen, int budget, int n_sink, double recent);

// The slots to evict so that `head` holds at most `budget` rows: the unprotected rows with the
// lowest score, ties to the oldest (lowest position). scores: slot-indexed; null = by position.
std::vector<int> select_lowest(const HeadStore& head, int budget, Protection protect, const float* scores);

// select_lowest into `out` (cleared), `candidates` as scratch: no allocation once both have grown.
void select_lowest_into(const HeadStore& head, int budget, Protection protect, const float* scores,
                        std::vector<int>& candidates, std::vector<int>& out);

void evict_slots(HeadStore& head, std::span<const int> slots);

// evict_slots(head, select_lowest(...)) with reused scratch, so a decode step allocates nothing.
void evict_lowest(HeadStore& head, int budget, Protection protect, const float* scores);

// For policies whose rows wait unscored (NaN) until a pass scores them (kvzip, expected
// attention): the lowest-scored unprotected rows go while the scored rows alone exceed `budget`,
// ties to the oldest; unscored rows are neither evicted nor counted.
void evict_lowest_scored(HeadStore& head, int budget, Protection protect);

// Key-proxy cumulative scoring for one update: each new token's key, in order, attends (softmax
// of K . k / sqrt(D)) over the rows present before it; scores = decay * scores + a. The first
// row of an empty head starts at 1. `scratch` is reused across calls to avoid allocation.
struct KeyProxyScratch {
  std::vector<float> kt, logits, queries;
  std::vector<uint8_t> mask;
};
void accumulate_key_proxy(LayerRows& layer, const UpdateRows& update, float decay, KeyProxyScratch& scratch);

// scores = decay * scores + probs[q] for each query row q in order (attention source).
void accumulate_attention(HeadStore& head, const float* probs, int n_queries, int n_slots, float decay);

}  // namespace squeezekv
