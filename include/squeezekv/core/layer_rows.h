// LayerRows: the state a token policy works on — every KV head of one layer — and what an update
// added. Kept apart from LayerCache so that policies see rows, not the cache's bookkeeping.
#pragma once

#include <cstdint>
#include <vector>

#include "squeezekv/core/head_store.h"

namespace squeezekv {

struct LayerRows {
  std::vector<HeadStore> heads;  // n_batch * n_kv_heads, batch-major
  int n_batch = 1;
  int n_kv_heads = 1;
  int64_t tokens_seen = 0;  // tokens ever appended (the next token's position)

  int head_dim() const { return heads.front().head_dim(); }
  // Heads of one batch item share a selection in policies that select per layer (TOVA).
  int batch_of(int head) const { return head / n_kv_heads; }
};

// What the current update appended.
struct UpdateRows {
  const float* keys = nullptr;  // the update's keys, f32 [n_heads, n_new, head_dim]
  int n_new = 0;
  int64_t first_pos = 0;                // position of the first new token
  std::vector<std::vector<int>> slots;  // per head: the slots the new rows went to, in order
};

}  // namespace squeezekv
