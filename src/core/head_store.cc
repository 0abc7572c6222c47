#include "squeezekv/core/head_store.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace squeezekv {

HeadStore::HeadStore(int head_dim, KVType key_type, KVType value_type)
    : head_dim_(head_dim), key_type_(key_type), value_type_(value_type) {}

void HeadStore::append(const float* keys, const float* values, int n, int64_t first_pos,
                       int growth_cap, std::vector<int>& slots) {
  apply_evictions();  // the new rows follow every evicted one: they must not count them
  const int free_reused = std::min<int>(n, int(free_.size()));
  const int needed = n_slots_ + (n - free_reused);
  if (needed > capacity_) {
    // Growth by 1/8 (at least 16 rows) keeps appends amortised O(1) while resident memory stays
    // within 1/8 + 16 rows of what is held; an evicting head stops at its cap (budget + 1).
    int grown = capacity_ + std::max(capacity_ / 8, 16);
    if (growth_cap > 0) grown = std::min(grown, growth_cap);
    reallocate(std::max(needed, grown));
  }
  const size_t key_row = key_row_bytes(), value_row = value_row_bytes();
  const auto dim = size_t(head_dim_);
  for (int t = 0; t < n; ++t) {
    int slot;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      slot = n_slots_++;
    }
    store_rows(keys + size_t(t) * dim, keys_.data() + size_t(slot) * key_row, key_type_, dim, dim);
    store_rows(values + size_t(t) * dim, values_.data() + size_t(slot) * value_row, value_type_, dim, dim);
    scores_[size_t(slot)] = 0.0f;
    positions_[size_t(slot)] = first_pos + t;
    shifts_[size_t(slot)] = 0;
    slots.push_back(slot);
  }
  n_live_ += n;
}

void HeadStore::evict(int slot) {
  pending_.push_back(positions_[size_t(slot)]);
  positions_[size_t(slot)] = kFree;
  shifts_[size_t(slot)] = 0;  // a free slot is read unturned
  scores_[size_t(slot)] = 0.0f;
  --n_live_;
  if (slot == n_slots_ - 1) {
    --n_slots_;  // keep [0, n_slots) tight when the last slot goes
    while (n_slots_ > 0 && positions_[size_t(n_slots_ - 1)] == kFree) {
      --n_slots_;
      free_.erase(std::remove(free_.begin(), free_.end(), n_slots_), free_.end());
    }
  } else {
    free_.push_back(slot);
  }
}

void HeadStore::apply_evictions() {
  if (pending_.empty()) return;
  // One pass for a batch of evictions: a row's shift grows by the evicted positions below it.
  std::sort(pending_.begin(), pending_.end());
  int32_t most = 0;
  for (int s = 0; s < n_slots_; ++s) {
    const int64_t pos = positions_[size_t(s)];
    if (pos == kFree) continue;
    const auto below = std::lower_bound(pending_.begin(), pending_.end(), pos) - pending_.begin();
    shifts_[size_t(s)] += int32_t(below);
    most = std::max(most, shifts_[size_t(s)]);
  }
  max_shift_ = most;
  pending_.clear();
}

void HeadStore::reallocate(int new_capacity) {
  const size_t key_row = key_row_bytes(), value_row = value_row_bytes();
  std::vector<std::byte> keys(size_t(new_capacity) * key_row);
  std::vector<std::byte> values(size_t(new_capacity) * value_row);
  std::vector<float> scores(size_t(new_capacity), 0.0f);
  std::vector<int64_t> positions(size_t(new_capacity), kFree);
  std::vector<int32_t> shifts(size_t(new_capacity), 0);
  int out = 0;
  for (int s = 0; s < n_slots_; ++s) {
    if (positions_[size_t(s)] == kFree) continue;
    std::memcpy(keys.data() + size_t(out) * key_row, keys_.data() + size_t(s) * key_row, key_row);
    std::memcpy(values.data() + size_t(out) * value_row, values_.data() + size_t(s) * value_row, value_row);
    scores[size_t(out)] = scores_[size_t(s)];
    positions[size_t(out)] = positions_[size_t(s)];
    shifts[size_t(out)] = shifts_[size_t(s)];
    ++out;
  }
  keys_.swap(keys);
  values_.swap(values);
  scores_.swap(scores);
  positions_.swap(positions);
  shifts_.swap(shifts);
  capacity_ = new_capacity;
  n_slots_ = out;
  free_.clear();
}

void HeadStore::rotate_keys_to_origin(int64_t upto, int64_t n_rot, RopeStyle style, float rope_base) {
  if (upto <= origin_upto_) return;
  const auto hd = size_t(head_dim_);
  turn_scratch_.resize(hd + size_t(n_rot));
  float* row = turn_scratch_.data();
  float* cos_sin = row + hd;
  for (int s = 0; s < n_slots_; ++s) {
    const int64_t p = positions_[size_t(s)];
    if (p == kFree || p <= origin_upto_ || p > upto) continue;
    // A quantized key is decoded, turned and encoded again: one more rounding, once per row.
    std::byte* key = keys_.data() + size_t(s) * key_row_bytes();
    load_rows(key, key_type_, row, hd, hd);
    rope_cache(p, n_rot, rope_base, cos_sin);
    rope_apply_inverse(row, n_rot, style, cos_sin);
    store_rows(row, key, key_type_, hd, hd);
  }
  origin_upto_ = upto;
}

void HeadStore::compact(int rows) { reallocate(std::max(rows, n_live_)); }

void HeadStore::clear() {
  keys_ = {};
  values_ = {};
  scores_ = {};
  positions_ = {};
  shifts_ = {};
  pending_.clear();
  free_ = {};
  capacity_ = n_slots_ = n_live_ = 0;
  max_shift_ = 0;
  origin_upto_ = -1;
}

std::vector<int> HeadStore::slots_by_position() const {
  std::vector<int> slots;
  slots.reserve(size_t(n_live_));
  for (int s = 0; s < n_slots_; ++s) {
    if (positions_[size_t(s)] != kFree) slots.push_back(s);
  }
  std::sort(slots.begin(), slots.end(),
            [&](int a, int b) { return positions_[size_t(a)] < positions_[size_t(b)]; });
  return slots;
}

}  // namespace squeezekv
