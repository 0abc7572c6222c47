#include "squeezekv/core/head_store.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "squeezekv/ops/kivi_rows.h"

namespace squeezekv {

HeadStore::HeadStore(int head_dim, KVType key_type, KVType value_type, KiviLayout kivi)
    : head_dim_(head_dim),
      key_type_(key_type),
      value_type_(value_type),
      kivi_(kivi),
      key_bits_(kivi_bits(key_type)),
      value_bits_(kivi_bits(value_type)),
      key_tail_(head_dim),
      value_tail_(head_dim) {}

size_t HeadStore::value_row_bytes() const {
  if (value_bits_ > 0) return kivi_value_row_bytes(value_bits_, size_t(kivi_.group), size_t(head_dim_));
  return kv_row_bytes(value_type_, size_t(head_dim_));
}

size_t HeadStore::key_group_bytes() const {
  return kivi_key_group_bytes(key_bits_, size_t(kivi_.group), size_t(head_dim_));
}

void HeadStore::store_key(int slot, const float* key) {
  if (key_bits_ > 0) {
    key_tail_of_[size_t(slot)] = key_tail_.take(key, slot);
  } else {
    store_rows(key, keys_.data() + size_t(slot) * key_row_bytes(), key_type_, size_t(head_dim_), size_t(head_dim_));
  }
}

void HeadStore::store_value(int slot, const float* value) {
  std::byte* row = values_.data() + size_t(slot) * value_row_bytes();
  if (value_bits_ > 0) {
    value_tail_of_[size_t(slot)] = value_tail_.take(value, slot);
    std::memset(row, 0, value_row_bytes());  // min = scale = 0: the quantized pass adds nothing
  } else {
    store_rows(value, row, value_type_, size_t(head_dim_), size_t(head_dim_));
  }
}

void HeadStore::release_fp16(int slot) {
  if (key_bits_ > 0 && key_tail_of_[size_t(slot)] >= 0) {
    key_tail_.release(key_tail_of_[size_t(slot)]);
    key_tail_of_[size_t(slot)] = -1;
  }
  if (value_bits_ > 0 && value_tail_of_[size_t(slot)] >= 0) {
    value_tail_.release(value_tail_of_[size_t(slot)]);
    value_tail_of_[size_t(slot)] = -1;
  }
}

void HeadStore::append(const float* keys, const float* values, int n, int64_t first_pos, int growth_cap,
                       std::vector<int>& slots) {
  apply_evictions();  // the new rows follow every evicted one: they must not count them
  int needed = n_slots_ + std::max(0, n - int(free_.size()));
  if (needed > capacity_ && key_bits_ > 0) {
    reopen_sparse_groups(needed - capacity_);  // KIVI: reuse held slots rather than grow
    needed = n_slots_ + std::max(0, n - int(free_.size()));
  }
  if (needed > capacity_) {
    // The keys' storage says how far (core/storage_info.h: rows by 1/8, at least 16, which keeps
    // appends amortised O(1) within 1/8 + 16 rows of what is held; KIVI by 1/64, at least a
    // group); an evicting head stops at its cap (budget + 1).
    const int64_t step = storage_of(key_type_).grown(capacity_, storage_params());
    int grown = int(std::min<int64_t>(step, std::numeric_limits<int>::max()));
    if (growth_cap > 0) grown = std::min(grown, growth_cap);
    reallocate(std::max(needed, grown));
  }
  const auto dim = size_t(head_dim_);
  for (int t = 0; t < n; ++t) {
    int slot;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      slot = n_slots_++;
    }
    positions_[size_t(slot)] = first_pos + t;
    store_key(slot, keys + size_t(t) * dim);
    store_value(slot, values + size_t(t) * dim);
    scores_[size_t(slot)] = 0.0f;
    shifts_[size_t(slot)] = 0;
    if (key_bits_ > 0) ++group_live_[size_t(slot / kivi_.group)];
    slots.push_back(slot);
  }
  n_live_ += n;
}

bool HeadStore::key_quantized(int slot) const {
  if (key_bits_ == 0) return kv_quantized(key_type_);
  return group_quantized_[size_t(slot / kivi_.group)] != 0 && key_tail_of_[size_t(slot)] < 0;
}

void HeadStore::evict(int slot) {
  pending_.push_back(positions_[size_t(slot)]);
  positions_[size_t(slot)] = kFree;
  shifts_[size_t(slot)] = 0;  // a free slot is read unturned
  scores_[size_t(slot)] = 0.0f;
  --n_live_;
  release_fp16(slot);
  if (key_bits_ > 0) {
    key_kept_[size_t(slot)] = 0;
    const int g = slot / kivi_.group;
    --group_live_[size_t(g)];
    if (group_quantized_[size_t(g)]) {
      if (group_live_[size_t(g)] > 0) {
        ++held_;  // its codes share the group's scales: held until the group empties
        return;
      }
      // The group's last row: every slot of it is free again, the group open.
      group_quantized_[size_t(g)] = 0;
      held_ -= kivi_.group - 1;
      for (int s = g * kivi_.group; s < (g + 1) * kivi_.group; ++s) {
        if (s != slot) free_.push_back(s);
      }
    }
  }
  if (slot == n_slots_ - 1) {
    --n_slots_;  // keep [0, n_slots) tight when the last slot goes (never over a held row)
    while (n_slots_ > 0 && positions_[size_t(n_slots_ - 1)] == kFree &&
           !(key_bits_ > 0 && group_quantized_[size_t((n_slots_ - 1) / kivi_.group)])) {
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
  // Free slots (position kFree = -1, shift 0) count no evicted position below them, so every slot
  // is treated alike: no branch on liveness, which KIVI's held rows make unpredictable.
  int32_t most = 0;
  if (pending_.size() == 1) {  // a decode step's one eviction
    const int64_t evicted = pending_[0];
    for (int s = 0; s < n_slots_; ++s) {
      shifts_[size_t(s)] += int32_t(evicted < positions_[size_t(s)]);
      most = std::max(most, shifts_[size_t(s)]);
    }
  } else {
    std::sort(pending_.begin(), pending_.end());
    for (int s = 0; s < n_slots_; ++s) {
      const int64_t pos = positions_[size_t(s)];
      shifts_[size_t(s)] += int32_t(std::lower_bound(pending_.begin(), pending_.end(), pos) - pending_.begin());
      most = std::max(most, shifts_[size_t(s)]);
    }
  }
  max_shift_ = most;
  pending_.clear();
}

void HeadStore::reallocate(int new_capacity) {
  const int G = kivi_.group;
  // The new slot order: quantized KIVI key groups that hold a live row move whole (their codes
  // share scales, so their dead rows stay held), then every other live row, packed.
  std::vector<int> order;
  order.reserve(size_t(n_live_ + held_));
  if (key_bits_ > 0) {
    for (int g = 0; g * G < n_slots_; ++g) {
      if (!group_quantized_[size_t(g)]) continue;
      for (int s = g * G; s < (g + 1) * G; ++s) order.push_back(s);
    }
  }
  const int whole = int(order.size());
  for (int s = 0; s < n_slots_; ++s) {
    if (positions_[size_t(s)] == kFree) continue;
    if (key_bits_ > 0 && group_quantized_[size_t(s / G)]) continue;
    order.push_back(s);
  }
  const int capacity = capacity_for(std::max(new_capacity, int(order.size())));

  const size_t key_bytes =
      key_bits_ > 0 ? size_t(capacity / G) * key_group_bytes() : size_t(capacity) * key_row_bytes();
  const size_t value_row = value_row_bytes();
  std::vector<std::byte> keys(key_bytes);
  std::vector<std::byte> values(size_t(capacity) * value_row);
  std::vector<float> scores(size_t(capacity), 0.0f);
  std::vector<int64_t> positions(size_t(capacity), kFree);
  std::vector<int32_t> shifts(size_t(capacity), 0);
  std::vector<int32_t> key_tail_of(key_bits_ > 0 ? size_t(capacity) : 0, -1);
  std::vector<int32_t> value_tail_of(value_bits_ > 0 ? size_t(capacity) : 0, -1);
  std::vector<uint8_t> group_quantized(key_bits_ > 0 ? size_t(capacity / G) : 0, 0);
  std::vector<int32_t> group_live(key_bits_ > 0 ? size_t(capacity / G) : 0, 0);
  std::vector<uint8_t> key_kept(key_bits_ > 0 ? size_t(capacity) : 0, 0);
  for (size_t i = 0; i < order.size(); ++i) {
    const auto s = size_t(order[i]);
    scores[i] = scores_[s];
    positions[i] = positions_[s];
    shifts[i] = shifts_[s];
    std::memcpy(values.data() + i * value_row, values_.data() + s * value_row, value_row);
    if (key_bits_ == 0) {
      std::memcpy(keys.data() + i * key_row_bytes(), keys_.data() + s * key_row_bytes(), key_row_bytes());
    } else {
      if (positions_[s] != kFree) ++group_live[i / size_t(G)];
      key_kept[i] = key_kept_[s];
      if (const int t = key_tail_of_[s]; t >= 0) {
        key_tail_of[i] = t;
        key_tail_.set_owner(t, int(i));
      }
    }
    if (value_bits_ > 0) {
      if (const int t = value_tail_of_[s]; t >= 0) {
        value_tail_of[i] = t;
        value_tail_.set_owner(t, int(i));
      }
    }
  }
  for (int g = 0; g < whole / std::max(G, 1); ++g) {
    const auto old = size_t(order[size_t(g * G)] / G);
    std::memcpy(keys.data() + size_t(g) * key_group_bytes(), keys_.data() + old * key_group_bytes(), key_group_bytes());
    group_quantized[size_t(g)] = 1;
  }
  keys_.swap(keys);
  values_.swap(values);
  scores_.swap(scores);
  positions_.swap(positions);
  shifts_.swap(shifts);
  key_tail_of_.swap(key_tail_of);
  value_tail_of_.swap(value_tail_of);
  group_quantized_.swap(group_quantized);
  group_live_.swap(group_live);
  key_kept_.swap(key_kept);
  capacity_ = capacity;
  n_slots_ = int(order.size());
  free_.clear();
}

void HeadStore::rotate_keys_to_origin(int64_t upto, int64_t n_rot, RopeStyle style, float rope_base) {
  if (upto <= origin_upto_) return;
  const auto hd = size_t(head_dim_);
  const int G = kivi_.group;
  const bool grouped = key_bits_ > 0;
  turn_scratch_.resize(hd + size_t(n_rot) + (grouped ? size_t(G) * hd : 0));
  float* row = turn_scratch_.data();
  float* cos_sin = row + hd;
  auto due = [&](int s) {
    const int64_t p = positions_[size_t(s)];
    return p != kFree && p > origin_upto_ && p <= upto;
  };
  auto turn = [&](float* key, int64_t p) {
    rope_cache(p, n_rot, rope_base, cos_sin);
    rope_apply_inverse(key, n_rot, style, cos_sin);
  };
  std::vector<int> groups;  // KIVI groups with a quantized key to turn
  for (int s = 0; s < n_slots_; ++s) {
    if (!due(s)) continue;
    if (grouped && key_quantized(s)) {
      if (groups.empty() || groups.back() != s / G) groups.push_back(s / G);
      continue;
    }
    // A quantized key is decoded, turned and encoded again: one more rounding, once per row.
    load_key(s, row);
    turn(row, positions_[size_t(s)]);
    if (grouped) key_tail_.store(key_tail_of_[size_t(s)], row);
    else store_rows(row, keys_.data() + size_t(s) * key_row_bytes(), key_type_, hd, hd);
  }
  // KIVI: a group's codes share per-channel scales, so the whole group is encoded again (its other
  // rows take one more rounding; under the span rule only sinks turn, once each).
  float* tile = cos_sin + n_rot;
  for (const int g : groups) {
    for (int j = 0; j < G; ++j) {
      const int s = g * G + j;
      load_key(s, tile + size_t(j) * hd);
      if (due(s) && key_quantized(s)) turn(tile + size_t(j) * hd, positions_[size_t(s)]);
    }
    quantize_key_group(g, tile);
  }
  origin_upto_ = upto;
}

void HeadStore::compact(int rows) { reallocate(std::max(rows, rows_needed())); }

void HeadStore::clear() {
  keys_ = {};
  values_ = {};
  scores_ = {};
  positions_ = {};
  shifts_ = {};
  pending_.clear();
  free_ = {};
  key_tail_.clear();
  value_tail_.clear();
  key_tail_of_ = {};
  value_tail_of_ = {};
  group_quantized_ = {};
  group_live_ = {};
  key_kept_ = {};
  held_ = 0;
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
  std::sort(slots.begin(), slots.end(), [&](int a, int b) { return positions_[size_t(a)] < positions_[size_t(b)]; });
  return slots;
}

}  // namespace squeezekv
