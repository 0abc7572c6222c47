// HeadStore: one KV head's kept rows.
//
// Layout: `capacity` slots; slot s holds key row keys[s * key_row_bytes ..] and value row
// values[s * value_row_bytes ..] (each in its own KVType: f16, f32 or a per-row block format
// q8_0 / q4_0, ops/kv_rows.h), one fp32 score and the token's original position. An
// evicted slot is marked free (position -1) and refilled by the next appended row, so eviction
// never moves K/V; rows only move when the capacity changes (compaction keeps their order).
//
// Positions inside the cache (docs/positions.md): each slot also counts its `shift`, how many rows
// of lower position were evicted since it was stored. An engine that rotated a key by its rank at
// insertion (the live rows of lower position then) finds its rank now as that rank minus the
// shift, and rotates the key back by `shift` positions when it reads it. Evictions are recorded
// by evict() and folded into the shifts by apply_evictions() in one pass (LayerCache does this at
// the end of every update; append does it first), so shifts() and max_shift() are current after it.
//
// Clamped distances (PositionRule::span): keys are stored rotated by their text position; once a
// row is farther than the clamp from every query it will meet, rotate_keys_to_origin turns its key
// back to RoPE position 0 in place (once per row), and the engine rotates such rows forward to the
// clamped position when it reads them.
//
// KIVI storage (kivi2 / kivi4, ops/kivi_rows.h; docs/semantics.md "K/V storage"): slots form groups
// of G consecutive slots. A group is open while its keys wait in fp16 (in the key Fp16Rows pool) and
// quantized once it is full and the open groups hold kivi_residual keys (at least G): then every
// full open group becomes per-channel codes. A row evicted from a quantized group cannot free its
// bytes alone: it stays there dead ("held", counted in resident_bytes) until every row of its group
// is gone, when the whole group is open again, or until a new row finds no free slot: rather than
// grow, the store opens the quantized group with the fewest live rows if at most half of it is live
// (its live keys are decoded into the fp16 pool and stay there, never quantized twice; its dead
// slots take the new rows). Values are quantized per row: the newest residual
// values stay fp16 (the value pool), the older ones are quantized one by one (settle_kivi).
// Positions below fp16_below (kivi_sink) never leave the fp16 pools.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "squeezekv/core/fp16_rows.h"
#include "squeezekv/core/state_stream.h"
#include "squeezekv/core/storage_info.h"
#include "squeezekv/ops/kv_rows.h"
#include "squeezekv/ops/model_ops.h"

namespace squeezekv {

// The KIVI parameters a HeadStore needs (KVCacheConfig's kivi_group, kivi_residual, kivi_sinks()).
struct KiviLayout {
  int group = 32;
  int residual = 128;
  int64_t fp16_below = 0;
};

class HeadStore {
 public:
  static constexpr int64_t kFree = -1;

  HeadStore(int head_dim, KVType type) : HeadStore(head_dim, type, type) {}
  HeadStore(int head_dim, KVType key_type, KVType value_type, KiviLayout kivi = {});

  int head_dim() const { return head_dim_; }
  KVType key_type() const { return key_type_; }
  KVType value_type() const { return value_type_; }
  // What the head's storage (core/storage_info.h) is built from: its formats and KIVI layout.
  StorageParams storage_params() const {
    return {key_type_, value_type_, head_dim_, kivi_.group, kivi_.residual, kivi_.fp16_below};
  }
  int n_slots() const { return n_slots_; }  // slots [0, n_slots) hold every live row
  int n_live() const { return n_live_; }
  int capacity() const { return capacity_; }
  // K/V bytes allocated: every slot up to the capacity (codes and block scales of the quantized
  // formats included; free slots count, as they stay allocated), and KIVI's fp16 pools.
  size_t resident_bytes() const { return keys_.size() + values_.size() + key_tail_.bytes() + value_tail_.bytes(); }
  // The per-slot bookkeeping beside the K/V bytes (scores, positions, shifts; KIVI's indices and
  // group flags), as allocated: what a saved cache holds besides resident_bytes().
  size_t slot_bytes() const {
    return scores_.size() * sizeof(float) + positions_.size() * sizeof(int64_t) + shifts_.size() * sizeof(int32_t) +
           (key_tail_of_.size() + value_tail_of_.size() + group_live_.size()) * sizeof(int32_t) +
           group_quantized_.size() + key_kept_.size();
  }
  // KIVI: rows evicted from quantized key groups and still held there (0 for the other formats).
  int held() const { return held_; }
  // The capacity that holds `rows` rows: KIVI keys are allocated in whole groups.
  int capacity_for(int rows) const {
    return key_bits_ > 0 ? (rows + kivi_.group - 1) / kivi_.group * kivi_.group : rows;
  }
  // Rows whose key (value) is read from fp16 in a KIVI store; 0 otherwise.
  int fp16_keys() const { return key_tail_.live(); }
  int fp16_values() const { return value_tail_.live(); }
  size_t fp16_bytes() const { return key_tail_.bytes() + value_tail_.bytes(); }  // the pools as allocated
  // Whether slot's key sits in quantized codes (false for float formats and KIVI's fp16 rows).
  bool key_quantized(int slot) const;

  // ---- Reading the rows, whatever the format (the engine's attention and the policies' scores).
  // One slot's key or value as f32 [head_dim]; a slot that is not live reads as whatever it holds.
  void load_key(int slot, float* out) const;
  void load_value(int slot, float* out) const;
  // query_probs (ops/kv_rows.h) over slots [0, n_rows): queries against the stored keys, patched
  // rows read through their patch keys, a masked softmax per query.
  bool key_probs(const float* q, size_t n_q, size_t ld_q, size_t n_rows, const uint8_t* mask, float scale, float* probs,
                 size_t ld, RowPatches patches = {}) const;
  // query_probs_rotated: each key turned back by its shift before the dot.
  bool key_probs_rotated(const float* q, size_t n_q, size_t ld_q, size_t n_rows, size_t n_rot, bool neox,
                         const float* turns, const uint8_t* mask, float scale, float* probs, size_t ld) const;
  // rows_weighted_sum_group over slots [0, n_rows): out[g * ld_out + i] += sum_j w[g * ld_w + j] * value j.
  void add_weighted_values(const float* w, size_t n_w, size_t ld_w, size_t n_rows, float* out, size_t ld_out) const;
  // Keys of slots [first, first + count) as f32 [count, head_dim] (KIVI groups decoded channel
  // by channel, the same floats as load_key; the prompt's blocked attention, keys turned back).
  void load_keys(int first, int count, float* out) const;
  // Keys of slots [first, first + count) transposed: out[d * ld + j] = channel d of slot first + j
  // (KIVI groups decoded channel by channel; the prompt's tiles of quantized keys).
  void load_keys_transposed(int first, int count, float* out, size_t ld) const;
  // Row formats only (not KIVI): the slot array of keys / values as the row kernels read it.
  const void* keys() const { return keys_.data(); }
  const void* values() const { return values_.data(); }
  const float* scores() const { return scores_.data(); }
  float* scores() { return scores_.data(); }
  const int64_t* positions() const { return positions_.data(); }
  const int32_t* shifts() const { return shifts_.data(); }
  // The largest shift of a live row (0: every rank equals the rank it was stored at).
  int32_t max_shift() const { return max_shift_; }
  bool evictions_pending() const { return !pending_.empty(); }
  bool live(int slot) const { return positions_[size_t(slot)] != kFree; }

  // Stores n rows (f32, [n, head_dim]) at positions first_pos.., free slots first; their slots are
  // appended to `slots`. Grows the capacity to at least n_live + n, in steps of 1/8 (at least 16
  // rows), never past growth_cap when it is > 0.
  void append(const float* keys, const float* values, int n, int64_t first_pos, int growth_cap,
              std::vector<int>& slots);
  void evict(int slot);
  // Adds to every live row's shift the rows evicted since the last call with lower position.
  void apply_evictions();
  // Turns the keys of live rows at positions in (origin_upto(), upto] back by their own position
  // (rope_cache's arithmetic), so they sit at RoPE position 0; origin_upto() becomes upto. Rows
  // stored afterwards must have higher positions (they do: positions only grow).
  void rotate_keys_to_origin(int64_t upto, int64_t n_rot, RopeStyle style, float rope_base);
  // Rows at positions <= this hold keys at RoPE position 0 (-1: none).
  int64_t origin_upto() const { return origin_upto_; }
  bool at_origin(int slot) const {
    const int64_t p = positions_[size_t(slot)];
    return p != kFree && p <= origin_upto_;
  }

  // Moves the live rows to slots [0, n_live) in slot order and sets capacity = max(rows, n_live)
  // (KIVI: quantized key groups move whole, held rows included, before the other rows; the
  // capacity is rounded up to whole groups).
  void compact(int rows);
  void clear();
  // KIVI: quantizes the values older than the residual and the full open key groups once the
  // residual is reached, then trims the fp16 pools. LayerCache calls it after every update's
  // evictions (so groups form from the rows that stay). No-op for the other formats.
  void settle_kivi();
  // Rows needed to hold the live rows and the held ones (compact's floor).
  int rows_needed() const { return n_live_ + held_; }

  // Live slots ordered by position (oldest first).
  std::vector<int> slots_by_position() const;

  // ---- Saving (engine/cache_file.h; core/head_store_state.cc). save_state writes every member
  // that decides what the head does next (rows in their stored bytes, scores, positions, shifts,
  // free slots in their reuse order, KIVI's groups and pools), so that a loaded head continues bit
  // for bit as this one would. load_state reads such a state into this head, which must have the
  // same head_dim, formats and KIVI layout; it checks the state holds together (sizes, slots,
  // indices; FormatError naming what does not) before replacing anything, so a failed load leaves
  // the head as it was. Positions are checked against `tokens_seen`, the layer's count.
  void save_state(StateWriter& out) const;
  void load_state(StateReader& in, int64_t tokens_seen);

 private:
  // KIVI keys of slots [first, first + count) by runs inside one group: quantized(group bytes,
  // row in group, run, j) for a quantized group's part, then fp16(slot, j) for each of its rows
  // held in fp16; for an open group fp16(slot, j) for every row (j: the row's index from first).
  template <class Quantized, class Fp16>
  void for_key_runs(int first, int count, const Quantized& quantized, const Fp16& fp16) const;
  void reallocate(int new_capacity);
  void check_loaded(int64_t tokens_seen) const;  // load_state's checks of a state just read
  void reopen_sparse_groups(int short_by);
  void reopen_group(int g);
  size_t key_row_bytes() const { return kv_row_bytes(key_type_, size_t(head_dim_)); }
  size_t value_row_bytes() const;
  size_t key_group_bytes() const;
  bool pinned(int slot) const { return positions_[size_t(slot)] < kivi_.fp16_below; }
  bool key_fp16(int slot) const { return pinned(slot) || key_kept_[size_t(slot)]; }
  void store_key(int slot, const float* key);
  void store_value(int slot, const float* value);
  void release_fp16(int slot);
  void flush_values();
  void flush_key_groups();
  void quantize_key_group(int g, float* tile);
  void kivi_key_dots(const float* q, size_t n_q, size_t ld_q, size_t n_rows, float* out, size_t ld) const;

  int head_dim_;
  KVType key_type_;
  KVType value_type_;
  KiviLayout kivi_;
  int key_bits_ = 0;  // KIVI code bits of the keys (0: a row format)
  int value_bits_ = 0;
  Fp16Rows key_tail_;                                   // KIVI: keys of open groups and pinned rows, in fp16
  Fp16Rows value_tail_;                                 // KIVI: the newest values and pinned ones, in fp16
  std::vector<int32_t> key_tail_of_;                    // per slot: its row in key_tail_, -1 none
  std::vector<int32_t> value_tail_of_;                  // per slot: its row in value_tail_, -1 none
  std::vector<uint8_t> group_quantized_;                // per key group of G slots
  std::vector<int32_t> group_live_;                     // live rows per key group
  std::vector<uint8_t> key_kept_;                       // per slot: key kept in fp16 after its group reopened
  int held_ = 0;                                        // dead rows inside quantized key groups
  std::vector<std::pair<int64_t, int>> flush_waiting_;  // settle_kivi's scratch (no allocation per step)
  std::vector<int> flush_groups_;
  int capacity_ = 0;
  int n_slots_ = 0;
  int n_live_ = 0;
  std::vector<std::byte> keys_;
  std::vector<std::byte> values_;
  std::vector<float> scores_;
  std::vector<int64_t> positions_;
  std::vector<int32_t> shifts_;
  std::vector<int64_t> pending_;  // positions evicted since the last apply_evictions
  int32_t max_shift_ = 0;
  int64_t origin_upto_ = -1;
  std::vector<float> turn_scratch_;  // one key row and its cos/sin table (rotate_keys_to_origin)
  std::vector<int> free_;            // freed slots below n_slots_, reused last-freed first
};

}  // namespace squeezekv
