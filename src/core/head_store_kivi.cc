// HeadStore's readers for every format, and KIVI's quantization schedule (settle_kivi, and the
// reopening of sparse key groups). The
// readers are const and run from many threads at once (the engine's attention tasks share a
// head), so their scratch is thread_local.
#include <algorithm>
#include <cstring>
#include <utility>

#include "squeezekv/core/head_store.h"
#include "squeezekv/ops/kivi_rows.h"

namespace squeezekv {
namespace {

float* scratch(size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

}  // namespace

void HeadStore::load_key(int slot, float* out) const {
  const auto hd = size_t(head_dim_);
  if (key_bits_ == 0) {
    load_rows(keys_.data() + size_t(slot) * key_row_bytes(), key_type_, out, hd, hd);
  } else if (const int t = key_tail_of_[size_t(slot)]; t >= 0) {
    key_tail_.load(t, out);
  } else if (const int g = slot / kivi_.group; group_quantized_[size_t(g)]) {
    const auto* group = reinterpret_cast<const uint8_t*>(keys_.data()) + size_t(g) * key_group_bytes();
    kivi_load_key(group, key_bits_, size_t(kivi_.group), hd, size_t(slot % kivi_.group), out);
  } else {
    std::fill(out, out + hd, 0.0f);  // a free slot of an open group
  }
}

void HeadStore::load_value(int slot, float* out) const {
  const auto hd = size_t(head_dim_);
  const std::byte* row = values_.data() + size_t(slot) * value_row_bytes();
  if (value_bits_ == 0) {
    load_rows(row, value_type_, out, hd, hd);
  } else if (const int t = value_tail_of_[size_t(slot)]; t >= 0) {
    value_tail_.load(t, out);
  } else {
    kivi_load_value_row(reinterpret_cast<const uint8_t*>(row), value_bits_, size_t(kivi_.group), hd, out);
  }
}

template <class Quantized, class Fp16>
void HeadStore::for_key_runs(int first, int count, const Quantized& quantized, const Fp16& fp16) const {
  const int G = kivi_.group;
  for (int j = 0; j < count;) {
    const int s = first + j, g = s / G;
    const int run = std::min(count - j, (g + 1) * G - s);
    if (group_quantized_[size_t(g)]) {
      quantized(reinterpret_cast<const uint8_t*>(keys_.data()) + size_t(g) * key_group_bytes(), s - g * G, run, j);
      for (int i = 0; i < run; ++i) {
        if (key_tail_of_[size_t(s + i)] >= 0) fp16(s + i, j + i);
      }
    } else {
      for (int i = 0; i < run; ++i) fp16(s + i, j + i);
    }
    j += run;
  }
}

void HeadStore::load_keys(int first, int count, float* out) const {
  const auto hd = size_t(head_dim_);
  if (key_bits_ == 0) {
    load_rows(keys_.data() + size_t(first) * key_row_bytes(), key_type_, out, size_t(count) * hd, hd);
    return;
  }
  // A quantized group's part in one channel-by-channel decode, its rows held in fp16 read over it.
  for_key_runs(
      first, count,
      [&](const uint8_t* group, int row, int run, int j) {
        kivi_load_keys(group, key_bits_, size_t(kivi_.group), hd, size_t(row), size_t(run), out + size_t(j) * hd);
      },
      [&](int slot, int j) { load_key(slot, out + size_t(j) * hd); });
}

void HeadStore::load_keys_transposed(int first, int count, float* out, size_t ld) const {
  const auto hd = size_t(head_dim_);
  float* row = scratch(hd);
  auto put_row = [&](int slot, int j) {
    load_key(slot, row);
    for (size_t d = 0; d < hd; ++d) out[d * ld + size_t(j)] = row[d];
  };
  if (key_bits_ == 0) {
    for (int j = 0; j < count; ++j) put_row(first + j, j);
    return;
  }
  // KIVI: each quantized group's part in one channel-by-channel decode, then the rows held in
  // fp16 (and the free slots of open groups, zeros) over it, as load_key reads them.
  for_key_runs(
      first, count,
      [&](const uint8_t* group, int first_row, int run, int j) {
        kivi_load_keys_transposed(group, key_bits_, size_t(kivi_.group), hd, size_t(first_row), size_t(run), out + j,
                                  ld);
      },
      put_row);
}

void HeadStore::kivi_key_dots(const float* q, size_t n_q, size_t ld_q, size_t n_rows, float* out, size_t ld) const {
  const auto hd = size_t(head_dim_);
  const auto G = size_t(kivi_.group);
  const auto* codes = reinterpret_cast<const uint8_t*>(keys_.data());
  // Quantized groups: the codes' dots, G rows at a time (a group cut by n_rows goes through a
  // small buffer, as out holds only n_rows columns).
  for (size_t g = 0; g * G < n_rows; ++g) {
    if (!group_quantized_[g]) continue;
    const uint8_t* group = codes + g * key_group_bytes();
    if ((g + 1) * G <= n_rows) {
      kivi_key_group_dots(q, n_q, ld_q, group, key_bits_, G, hd, out + g * G, ld);
    } else {
      float* part = scratch(n_q * G);
      kivi_key_group_dots(q, n_q, ld_q, group, key_bits_, G, hd, part, G);
      for (size_t i = 0; i < n_q; ++i) {
        std::copy(part + i * G, part + i * G + (n_rows - g * G), out + i * ld + g * G);
      }
    }
  }
  // Rows in fp16 (open groups, pinned sinks): the whole pool's dots in one call (a row's dot does
  // not depend on its neighbours), each live row's then written over its slot's group value.
  const auto n_tail = size_t(key_tail_.size());
  if (n_tail == 0) return;
  float* dots = scratch(n_q * n_tail);
  row_dots_group(q, n_q, ld_q, key_tail_.row(0), KVType::f16, n_tail, hd, dots, n_tail);
  for (size_t t = 0; t < n_tail; ++t) {
    const int s = key_tail_.owner(int(t));
    if (s < 0 || size_t(s) >= n_rows) continue;
    for (size_t i = 0; i < n_q; ++i) out[i * ld + size_t(s)] = dots[i * n_tail + t];
  }
}

bool HeadStore::key_probs(const float* q, size_t n_q, size_t ld_q, size_t n_rows, const uint8_t* mask, float scale,
                          float* probs, size_t ld, RowPatches patches) const {
  const auto hd = size_t(head_dim_);
  if (key_bits_ == 0) {
    return query_probs_patched(q, n_q, ld_q, keys_.data(), key_type_, n_rows, hd, mask, scale, probs, ld, patches);
  }
  kivi_key_dots(q, n_q, ld_q, n_rows, probs, ld);
  for (size_t j = 0; j < patches.count; ++j) {
    const auto slot = size_t(patches.slots[j]);
    if (slot >= n_rows) continue;
    row_dots_group(q, n_q, ld_q, patches.keys + j * hd, KVType::f32, 1, hd, probs + slot, ld);
  }
  bool any = false;
  for (size_t g = 0; g < n_q; ++g) any = masked_softmax(probs + g * ld, mask, n_rows, scale);
  return any;
}

bool HeadStore::key_probs_rotated(const float* q, size_t n_q, size_t ld_q, size_t n_rows, size_t n_rot, bool neox,
                                  const float* turns, const uint8_t* mask, float scale, float* probs, size_t ld) const {
  const auto hd = size_t(head_dim_);
  if (key_bits_ == 0) {
    return query_probs_rotated(q, n_q, ld_q, keys_.data(), key_type_, shifts_.data(), n_rows, hd, n_rot, neox, turns,
                               mask, scale, probs, ld);
  }
  // KIVI: each group of keys is decoded into a small tile, turned back by the rows' shifts and
  // dotted (the per-channel codes cannot take a per-row rotation in registers).
  const auto G = size_t(kivi_.group);
  float* tile = scratch(G * hd);
  for (size_t first = 0; first < n_rows; first += G) {
    const size_t count = std::min(G, n_rows - first);
    load_keys(int(first), int(count), tile);
    rotate_rows_back(tile, KVType::f32, shifts_.data() + first, count, hd, n_rot, neox, turns, tile);  // in place
    row_dots_group(q, n_q, ld_q, tile, KVType::f32, count, hd, probs + first, ld);
  }
  bool any = false;
  for (size_t g = 0; g < n_q; ++g) any = masked_softmax(probs + g * ld, mask, n_rows, scale);
  return any;
}

void HeadStore::add_weighted_values(const float* w, size_t n_w, size_t ld_w, size_t n_rows, float* out,
                                    size_t ld_out) const {
  const auto hd = size_t(head_dim_);
  if (value_bits_ == 0) {
    rows_weighted_sum_group(w, n_w, ld_w, values_.data(), value_type_, n_rows, hd, out, ld_out);
    return;
  }
  // Rows held in fp16 have an all-zero quantized row (min = scale = 0): the quantized pass adds
  // nothing for them, and the fp16 pass adds their values.
  kivi_values_weighted_sum_group(w, n_w, ld_w, reinterpret_cast<const uint8_t*>(values_.data()), value_bits_,
                                 size_t(kivi_.group), hd, n_rows, out, ld_out);
  // The fp16 pool in one call: each pool row weighted by its slot's weights (free rows and rows
  // past n_rows by 0, which the kernel skips), added in pool order as row by row would.
  const auto n_tail = size_t(value_tail_.size());
  if (n_tail == 0) return;
  float* weights = scratch(n_w * n_tail);
  std::fill(weights, weights + n_w * n_tail, 0.0f);
  for (size_t t = 0; t < n_tail; ++t) {
    const int s = value_tail_.owner(int(t));
    if (s < 0 || size_t(s) >= n_rows) continue;
    for (size_t i = 0; i < n_w; ++i) weights[i * n_tail + t] = w[i * ld_w + size_t(s)];
  }
  rows_weighted_sum_group(weights, n_w, n_tail, value_tail_.row(0), KVType::f16, n_tail, hd, out, ld_out);
}

void HeadStore::settle_kivi() {
  if (value_bits_ > 0) flush_values();
  if (key_bits_ > 0) flush_key_groups();
  if (key_bits_ > 0) key_tail_.trim(key_tail_of_);
  if (value_bits_ > 0) value_tail_.trim(value_tail_of_);
}

void HeadStore::flush_values() {
  // The fp16 values beyond the newest `residual` (pinned sinks aside) are quantized, oldest first.
  // (position, pool row); a member, so that a decode step allocates nothing.
  std::vector<std::pair<int64_t, int>>& waiting = flush_waiting_;
  waiting.clear();
  for (int t = 0; t < value_tail_.size(); ++t) {
    const int s = value_tail_.owner(t);
    if (s >= 0 && !pinned(s)) waiting.emplace_back(positions_[size_t(s)], t);
  }
  if (waiting.size() <= size_t(kivi_.residual)) return;
  const size_t excess = waiting.size() - size_t(kivi_.residual);
  std::nth_element(waiting.begin(), waiting.begin() + long(excess - 1), waiting.end());
  const auto hd = size_t(head_dim_);
  float* row = scratch(hd);
  for (size_t i = 0; i < excess; ++i) {
    const int t = waiting[i].second;
    const int s = value_tail_.owner(t);
    value_tail_.load(t, row);
    kivi_quantize_value_row(row, value_bits_, size_t(kivi_.group), hd,
                            reinterpret_cast<uint8_t*>(values_.data() + size_t(s) * value_row_bytes()));
    value_tail_.release(t);
    value_tail_of_[size_t(s)] = -1;
  }
}

void HeadStore::flush_key_groups() {
  // KIVI's schedule: once `residual` keys (at least one group) wait in fp16, every full open group
  // is quantized; a group with a free slot waits for the next rows to fill it.
  const int G = kivi_.group;
  std::vector<int>& groups = flush_groups_;
  groups.clear();
  int waiting = 0;
  for (int t = 0; t < key_tail_.size(); ++t) {
    const int s = key_tail_.owner(t);
    if (s < 0 || key_fp16(s)) continue;
    ++waiting;
    if (!group_quantized_[size_t(s / G)]) groups.push_back(s / G);
  }
  if (waiting < std::max(kivi_.residual, G)) return;
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  float* tile = scratch(size_t(G) * size_t(head_dim_));
  for (const int g : groups) {
    if (group_live_[size_t(g)] != G) continue;
    for (int j = 0; j < G; ++j) key_tail_.load(key_tail_of_[size_t(g * G + j)], tile + size_t(j) * size_t(head_dim_));
    quantize_key_group(g, tile);
  }
}

void HeadStore::quantize_key_group(int g, float* tile) {
  // Live rows outside the sinks go into the codes; pinned rows stay in fp16, dead ones are left out.
  const int G = kivi_.group;
  uint8_t include[1024];
  bool any = false;
  for (int j = 0; j < G; ++j) {
    const int s = g * G + j;
    include[j] = positions_[size_t(s)] != kFree && !key_fp16(s);
    any = any || include[j];
  }
  if (!any) return;  // only sinks: nothing to quantize
  kivi_quantize_key_group(tile, size_t(head_dim_), include, key_bits_, size_t(G), size_t(head_dim_),
                          reinterpret_cast<uint8_t*>(keys_.data()) + size_t(g) * key_group_bytes());
  for (int j = 0; j < G; ++j) {
    const int s = g * G + j;
    if (!include[j] || key_tail_of_[size_t(s)] < 0) continue;
    key_tail_.release(key_tail_of_[size_t(s)]);
    key_tail_of_[size_t(s)] = -1;
  }
  group_quantized_[size_t(g)] = 1;
}

void HeadStore::reopen_sparse_groups(int short_by) {
  // Under scattered eviction held rows would make an evicting head grow (up to G - 1 dead rows per
  // live one); instead the quantized group with the fewest live rows opens again if at most half
  // of it is live.
  const int G = kivi_.group;
  while (short_by > 0) {
    int best = -1;
    for (int g = 0; g * G < n_slots_; ++g) {
      if (group_quantized_[size_t(g)] && (best < 0 || group_live_[size_t(g)] < group_live_[size_t(best)])) best = g;
    }
    if (best < 0 || 2 * group_live_[size_t(best)] > G) return;
    short_by -= G - group_live_[size_t(best)];
    reopen_group(best);
  }
}

void HeadStore::reopen_group(int g) {
  // Its live keys are decoded into the fp16 pool and kept there for good (never rounded twice);
  // its dead slots are free for the next rows.
  const int G = kivi_.group;
  float* row = scratch(size_t(head_dim_));
  for (int s = g * G; s < (g + 1) * G; ++s) {
    if (positions_[size_t(s)] == kFree) {
      free_.push_back(s);
      --held_;
    } else if (key_tail_of_[size_t(s)] < 0) {
      load_key(s, row);  // from the group's codes
      key_tail_of_[size_t(s)] = key_tail_.take(row, s);
      key_kept_[size_t(s)] = 1;
    }
  }
  group_quantized_[size_t(g)] = 0;
}

}  // namespace squeezekv
