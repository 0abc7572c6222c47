// LayerRows: the state a token policy works on — every KV head of one layer — and what an update
// added. Kept apart from LayerCache so that policies see rows, not the cache's bookkeeping.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "squeezekv/core/head_store.h"
#include "squeezekv/ops/model_ops.h"

namespace squeezekv {

// A context reconstruction under way (KVzip; engine/reconstruction.h): the chunk of the context
// [first, end) being reconstructed, the sinks (positions < n_sink) and the reconstruction's own
// rows (positions >= from, the positions the cache had seen when it began) are what its scores'
// softmax is taken over. `by_output`: each weight is also scaled by the row's value as the
// attention output projects it over the query's hidden state (KVzip+; TokenPolicy::
// weighs_reconstruction_by_output). `id`: no other reconstruction shares it, so that what is
// derived from this chunk's rows may be kept while it lasts.
struct ReconstructionSpan {
  int64_t n_sink = 0;
  int64_t first = 0;
  int64_t end = 0;
  int64_t from = 0;
  bool by_output = false;
  uint64_t id = 0;
  bool in_softmax(int64_t p) const { return p < n_sink || (p >= first && p < end) || p >= from; }
  bool in_chunk(int64_t p) const { return p >= first && p < end; }
};

struct LayerRows {
  std::vector<HeadStore> heads;  // n_batch * n_kv_heads, batch-major
  int n_batch = 1;
  int n_kv_heads = 1;
  int64_t tokens_seen = 0;                           // tokens ever appended (the next token's position)
  std::optional<ReconstructionSpan> reconstruction;  // the context reconstruction under way, if any

  int head_dim() const { return heads.front().head_dim(); }
  // Heads of one batch item share a selection in policies that select per layer (TOVA).
  int batch_of(int head) const { return head / n_kv_heads; }
};

// The queries of an update before RoPE, for a policy that models future queries
// (TokenPolicy::add_queries): q[t * ld + h * head_dim ..] is query head h of token t, at text
// position first_pos + t; the layer turns them with this RoPE and scales their dots by `scale`.
struct UpdateQueries {
  const float* q = nullptr;
  int n = 0;
  int n_heads = 0;
  size_t ld = 0;
  int64_t first_pos = 0;
  RopeStyle style = RopeStyle::normal;
  int n_rot = 0;
  float rope_base = 10000.0f;
  float scale = 1.0f;
};

// What the current update appended.
struct UpdateRows {
  const float* keys = nullptr;  // the update's keys, f32 [n_heads, n_new, head_dim]
  int n_new = 0;
  int64_t first_pos = 0;                // position of the first new token
  std::vector<std::vector<int>> slots;  // per head: the slots the new rows went to, in order
};

}  // namespace squeezekv
