// Fp16Rows: a small pool of fp16 rows outside a HeadStore's slot array, each owned by one slot.
// KIVI keeps its newest keys and values here until they are quantized (core/head_store.h); the
// pool stays near the rows it holds (it grows 4 rows at a time and is compacted when more than 8
// stand free), so its bytes are reported as allocated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "squeezekv/core/state_stream.h"

namespace squeezekv {

class Fp16Rows {
 public:
  explicit Fp16Rows(int dim = 0) : dim_(dim) {}

  // Stores `row` (dim floats) for `owner`; returns its index.
  int take(const float* row, int owner);
  void release(int index);
  const uint16_t* row(int index) const { return rows_.data() + size_t(index) * size_t(dim_); }
  uint16_t* row(int index) { return rows_.data() + size_t(index) * size_t(dim_); }
  void load(int index, float* out) const;
  void store(int index, const float* row);
  // Rows [0, size()): the slot that owns each, -1 when free.
  int owner(int index) const { return owners_[size_t(index)]; }
  void set_owner(int index, int owner) { owners_[size_t(index)] = owner; }
  int size() const { return int(owners_.size()); }
  int live() const { return live_; }
  size_t bytes() const { return rows_.size() * sizeof(uint16_t); }

  // When more than 8 rows stand free, moves the live rows to [0, live) and frees the rest;
  // index_of (per owner slot, -1 = none) is rewritten for the rows that moved.
  void trim(std::vector<int32_t>& index_of);
  void clear();

  // The pool as it stands (HeadStore::save_state); load_state checks its sizes and owners
  // (< n_owners) before replacing this pool's.
  void save_state(StateWriter& out) const;
  void load_state(StateReader& in, int n_owners);

 private:
  void reallocate(int rows);

  int dim_;
  int live_ = 0;
  std::vector<uint16_t> rows_;
  std::vector<int32_t> owners_;
  std::vector<int32_t> free_;
};

}  // namespace squeezekv
