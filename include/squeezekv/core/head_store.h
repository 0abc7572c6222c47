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
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "squeezekv/ops/kv_rows.h"
#include "squeezekv/ops/model_ops.h"

namespace squeezekv {

class HeadStore {
 public:
  static constexpr int64_t kFree = -1;

  HeadStore(int head_dim, KVType type) : HeadStore(head_dim, type, type) {}
  HeadStore(int head_dim, KVType key_type, KVType value_type);

  int head_dim() const { return head_dim_; }
  KVType key_type() const { return key_type_; }
  KVType value_type() const { return value_type_; }
  int n_slots() const { return n_slots_; }  // slots [0, n_slots) hold every live row
  int n_live() const { return n_live_; }
  int capacity() const { return capacity_; }
  size_t key_row_bytes() const { return kv_row_bytes(key_type_, size_t(head_dim_)); }
  size_t value_row_bytes() const { return kv_row_bytes(value_type_, size_t(head_dim_)); }
  // K/V bytes allocated: every slot up to the capacity (codes and block scales of the quantized
  // formats included; free slots count, as they stay allocated).
  size_t resident_bytes() const { return size_t(capacity_) * (key_row_bytes() + value_row_bytes()); }

  const void* keys() const { return keys_.data(); }
  const void* values() const { return values_.data(); }
  const void* key_row(int slot) const { return keys_.data() + size_t(slot) * key_row_bytes(); }
  const void* value_row(int slot) const { return values_.data() + size_t(slot) * value_row_bytes(); }
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

  // Moves the live rows to slots [0, n_live) in slot order and sets capacity = max(rows, n_live).
  void compact(int rows);
  void clear();

  // Live slots ordered by position (oldest first).
  std::vector<int> slots_by_position() const;

 private:
  void reallocate(int new_capacity);

  int head_dim_;
  KVType key_type_;
  KVType value_type_;
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
  std::vector<int> free_;  // freed slots below n_slots_, reused last-freed first
};

}  // namespace squeezekv
