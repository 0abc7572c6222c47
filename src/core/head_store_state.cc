// HeadStore::save_state / load_state (core/head_store.h): the head's members in a fixed order.
#include <string>

#include "squeezekv/core/head_store.h"
#include "squeezekv/ops/kivi_rows.h"

namespace squeezekv {
namespace {

constexpr int kMaxSavedCapacity = 1 << 30;

}  // namespace

void Fp16Rows::save_state(StateWriter& out) const {
  out.put(int32_t(dim_));
  out.put(int32_t(live_));
  out.put_vector(rows_);
  out.put_vector(owners_);
  out.put_vector(free_);
}

void Fp16Rows::load_state(StateReader& in, int n_owners) {
  Fp16Rows t(dim_);
  check_state(in.get<int32_t>("fp16 pool: dim") == dim_, "fp16 pool", "row width differs from the head's");
  t.live_ = in.get<int32_t>("fp16 pool: live");
  t.rows_ = in.get_vector<uint16_t>("fp16 pool: rows");
  t.owners_ = in.get_vector<int32_t>("fp16 pool: owners");
  t.free_ = in.get_vector<int32_t>("fp16 pool: free");
  check_state(t.rows_.size() == t.owners_.size() * size_t(dim_), "fp16 pool", "rows and owners differ in count");
  int live = 0;
  for (const int32_t o : t.owners_) {
    check_state(o >= -1 && o < n_owners, "fp16 pool", "an owner out of range");
    live += o >= 0 ? 1 : 0;
  }
  check_state(live == t.live_, "fp16 pool", "live count differs from its owners");
  std::vector<uint8_t> seen(t.owners_.size(), 0);
  for (const int32_t f : t.free_) {
    check_state(f >= 0 && size_t(f) < t.owners_.size() && t.owners_[size_t(f)] == -1 && !seen[size_t(f)], "fp16 pool",
                "a free row out of range, owned or listed twice");
    seen[size_t(f)] = 1;
  }
  *this = std::move(t);
}

void HeadStore::save_state(StateWriter& out) const {
  out.put(int32_t(capacity_));
  out.put(int32_t(n_slots_));
  out.put(int32_t(n_live_));
  out.put(int32_t(held_));
  out.put(max_shift_);
  out.put(origin_upto_);
  out.put_vector(keys_);
  out.put_vector(values_);
  out.put_vector(scores_);
  out.put_vector(positions_);
  out.put_vector(shifts_);
  out.put_vector(pending_);
  out.put_vector(free_);
  out.put_vector(key_tail_of_);
  out.put_vector(value_tail_of_);
  out.put_vector(group_quantized_);
  out.put_vector(group_live_);
  out.put_vector(key_kept_);
  key_tail_.save_state(out);
  value_tail_.save_state(out);
}

void HeadStore::load_state(StateReader& in, int64_t tokens_seen) {
  HeadStore t(head_dim_, key_type_, value_type_, kivi_);
  t.capacity_ = in.get<int32_t>("head: capacity");
  t.n_slots_ = in.get<int32_t>("head: slots");
  t.n_live_ = in.get<int32_t>("head: live rows");
  t.held_ = in.get<int32_t>("head: held rows");
  t.max_shift_ = in.get<int32_t>("head: largest shift");
  t.origin_upto_ = in.get<int64_t>("head: origin");
  t.keys_ = in.get_vector<std::byte>("head: keys");
  t.values_ = in.get_vector<std::byte>("head: values");
  t.scores_ = in.get_vector<float>("head: scores");
  t.positions_ = in.get_vector<int64_t>("head: positions");
  t.shifts_ = in.get_vector<int32_t>("head: shifts");
  t.pending_ = in.get_vector<int64_t>("head: pending evictions");
  t.free_ = in.get_vector<int>("head: free slots");
  t.key_tail_of_ = in.get_vector<int32_t>("head: fp16 keys");
  t.value_tail_of_ = in.get_vector<int32_t>("head: fp16 values");
  t.group_quantized_ = in.get_vector<uint8_t>("head: quantized groups");
  t.group_live_ = in.get_vector<int32_t>("head: live rows per group");
  t.key_kept_ = in.get_vector<uint8_t>("head: kept fp16 keys");
  check_state(t.capacity_ >= 0 && t.capacity_ <= kMaxSavedCapacity, "head", "capacity out of range");
  t.key_tail_.load_state(in, t.capacity_);
  t.value_tail_.load_state(in, t.capacity_);
  t.check_loaded(tokens_seen);
  *this = std::move(t);
}

void HeadStore::check_loaded(int64_t tokens_seen) const {
  const auto cap = size_t(capacity_);
  const int G = kivi_.group;
  check_state(n_slots_ >= 0 && n_slots_ <= capacity_, "head", "slot count beyond the capacity");
  check_state(key_bits_ == 0 || capacity_ % G == 0, "head", "KIVI capacity is not whole groups");
  const StorageParams storage = storage_params();
  check_state(keys_.size() == storage_of(key_type_).slot_bytes(key_type_, true, storage, capacity_) &&
                  values_.size() == storage_of(value_type_).slot_bytes(value_type_, false, storage, capacity_),
              "head", "key or value bytes differ from the capacity's");
  check_state(scores_.size() == cap && positions_.size() == cap && shifts_.size() == cap, "head",
              "per-slot arrays differ from the capacity");
  check_state(key_tail_of_.size() == (key_bits_ > 0 ? cap : 0) && value_tail_of_.size() == (value_bits_ > 0 ? cap : 0),
              "head", "fp16 indices differ from the capacity");
  const size_t groups = key_bits_ > 0 ? cap / size_t(G) : 0;
  check_state(group_quantized_.size() == groups && group_live_.size() == groups &&
                  key_kept_.size() == (key_bits_ > 0 ? cap : 0),
              "head", "KIVI group arrays differ from the capacity");
  int live = 0;
  for (size_t s = 0; s < cap; ++s) {
    const int64_t p = positions_[s];
    check_state(p == kFree || (p >= 0 && p < tokens_seen && s < size_t(n_slots_)), "head",
                "a position out of range (slot " + std::to_string(s) + ")");
    check_state(shifts_[s] >= 0 && shifts_[s] <= max_shift_, "head", "a shift out of range");
    live += p == kFree ? 0 : 1;
  }
  check_state(live == n_live_, "head", "live count differs from its positions");
  check_state(max_shift_ >= 0 && max_shift_ <= tokens_seen && origin_upto_ >= -1 && origin_upto_ < tokens_seen, "head",
              "shift or origin out of range");
  check_state(held_ >= 0 && held_ <= capacity_ && n_live_ + held_ <= capacity_, "head", "held rows out of range");
  std::vector<uint8_t> seen(cap, 0);
  for (const int f : free_) {
    check_state(f >= 0 && f < n_slots_ && positions_[size_t(f)] == kFree && !seen[size_t(f)], "head",
                "a free slot out of range, live or listed twice");
    seen[size_t(f)] = 1;
  }
  auto check_pool = [&](const std::vector<int32_t>& index_of, const Fp16Rows& pool) {
    for (size_t s = 0; s < index_of.size(); ++s) {
      const int32_t i = index_of[s];
      check_state(i == -1 || (i >= 0 && i < pool.size() && pool.owner(i) == int(s)), "head",
                  "an fp16 row index out of range");
    }
  };
  check_pool(key_tail_of_, key_tail_);
  check_pool(value_tail_of_, value_tail_);
  for (const uint8_t k : key_kept_) check_state(k <= 1, "head", "a kept-key flag out of range");
  // KIVI: each group's live count, the rows held dead in quantized groups, and an fp16 key for
  // every live row whose key is not in codes.
  int held = 0;
  for (size_t g = 0; g < groups; ++g) {
    check_state(group_quantized_[g] <= 1, "head", "a KIVI group flag out of range");
    int live_rows = 0;
    for (size_t s = g * size_t(G); s < (g + 1) * size_t(G); ++s) {
      if (positions_[s] == kFree) continue;
      ++live_rows;
      const bool fp16_key = !group_quantized_[g] || positions_[s] < kivi_.fp16_below || key_kept_[s];
      check_state(!fp16_key || key_tail_of_[s] >= 0, "head", "a live row's fp16 key is missing");
    }
    check_state(group_live_[g] == live_rows, "head", "a KIVI group's live count differs from its rows");
    if (group_quantized_[g]) held += G - live_rows;
  }
  check_state(held == held_, "head", "held rows differ from the quantized groups' dead rows");
}

}  // namespace squeezekv
