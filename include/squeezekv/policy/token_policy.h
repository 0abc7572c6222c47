// TokenPolicy: which rows a layer keeps, given its budget — one axis of every eviction method
// (docs/semantics.md, section 2). The allocator across layers is the other axis (alloc/).
//
// A policy scores rows (from the update's keys or from attention fed back by the engine) and
// evicts; the eviction loop itself (sinks, recent window, ties to the oldest) is written once in
// src/policy/eviction.h. One file per policy, each with its registry entry (methods/registry.h).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "squeezekv/core/component_params.h"
#include "squeezekv/core/layer_rows.h"
#include "squeezekv/core/state_stream.h"

namespace squeezekv {

class TokenPolicy {
 public:
  virtual ~TokenPolicy() = default;
  virtual std::string_view name() const = 0;

  // False when the policy holds every row it is given after the prompt (full, snapkv decode).
  virtual bool bounded() const { return true; }
  // True when the engine should feed attention probabilities back (add_attention).
  virtual bool wants_attention() const { return false; }

  // After the update's rows are stored: score them from the keys (key-proxy source).
  virtual void score_keys(LayerRows& /*layer*/, const UpdateRows& /*update*/) {}
  // probs: [n_queries, n_slots] attention of the update's queries over the head's slots, summed
  // over the query heads sharing this KV head; zero for masked or free slots.
  virtual void score_attention(LayerRows& /*layer*/, int /*head*/, const float* /*probs*/, int /*n_queries*/,
                               int /*n_slots*/) {}

  // Context reconstruction (KVzip, engine/reconstruction.h): true when the policy scores rows by
  // the attention a reconstruction pass pays them. During that pass the cache feeds it
  // score_reconstruction instead of score_attention: weights [n_queries, n_slots], per slot the
  // largest attention weight any query head of this KV head paid the row, the softmax taken over
  // the sinks, the chunk being reconstructed and the reconstruction's own rows; zero for a row
  // outside the chunk.
  virtual bool scores_reconstruction() const { return false; }
  // KVzip+ (Kim et al.'s normalisation): each weight is divided by the norm of the querying token's
  // hidden state (the attention's input) and multiplied by the norm of the row's value as the
  // attention output projection maps it for that query head, ||W_O,h v||: the row's share of what
  // the attention adds to the residual stream rather than of the softmax alone.
  virtual bool weighs_reconstruction_by_output() const { return false; }
  virtual void score_reconstruction(LayerRows& /*layer*/, int /*head*/, const float* /*weights*/, int /*n_queries*/,
                                    int /*n_slots*/) {}

  // True when the policy reads the queries of the prompt (expected attention): the engine hands
  // each update's queries, before RoPE, to add_queries before their attention.
  virtual bool wants_queries() const { return false; }
  virtual void add_queries(LayerRows& /*layer*/, const UpdateQueries& /*queries*/) {}

  // At the end of an update: evict until every head holds at most `budget` rows.
  virtual void evict(LayerRows& layer, int budget) = 0;

  // True when score_attention and evict_head of one head read and write that head's rows alone
  // (no state shared across heads or kept in the policy): the cache then runs them for different
  // heads at once, on several threads. False (the default) keeps every call on one thread.
  virtual bool heads_independent() const { return false; }
  // Head `head`'s part of evict(); called, instead of evict(), only when heads_independent()
  // (src/policy/per_head_policy.h: such policies write evict_head, and evict() loops over it).
  virtual void evict_head(LayerRows& layer, int /*head*/, int budget) { evict(layer, budget); }
  // Once, when the prompt has ended (default: the same as any update).
  virtual void finish_prompt(LayerRows& layer, int budget) { evict(layer, budget); }
  // The head split (alloc/head_split.h), for a policy whose PolicyInfo says splits_heads: head
  // `head`'s keep priority per slot into `out` (resized to the head's n_slots; higher = kept
  // longer; +inf for the rows the policy protects at the layer's `budget`), for the eviction
  // about to run (prompt_end: the one at the end of the prompt). False when the policy chooses
  // nothing by score at this eviction (snapkv after its prompt): each head then keeps the count
  // the last split gave it, through evict_head, which such a policy applies to that head alone.
  virtual bool keep_priorities(const LayerRows& /*layer*/, int /*head*/, int /*budget*/, bool /*prompt_end*/,
                               std::vector<float>& /*out*/) const {
    return false;
  }
  // Forget per-sequence state (the rows themselves are cleared by the cache).
  virtual void reset() {}

  // Saving a cache (engine/cache_file.h): the policy's own per-sequence state, whatever reset()
  // forgets (the rows' scores are the HeadStores' and saved with them), so that a loaded cache
  // continues exactly as the saved one would. A policy that keeps nothing between updates writes
  // nothing (the defaults); one that does writes it in save_state and reads it back in load_state,
  // given the layer's rows as loaded, checking what it reads (StateReader throws FormatError on a
  // truncated or impossible state). Called between updates only.
  virtual void save_state(StateWriter& /*out*/) const {}
  virtual void load_state(StateReader& /*in*/, const LayerRows& /*layer*/) {}
};

}  // namespace squeezekv
