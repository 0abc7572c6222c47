#include "squeezekv/core/fp16_rows.h"

#include <algorithm>
#include <cstring>

#include "squeezekv/ops/kv_rows.h"

namespace squeezekv {

int Fp16Rows::take(const float* row, int owner) {
  if (free_.empty()) {
    const int old = size();
    reallocate(old + 4);  // a handful at a time: the pool holds about the residual, no more
    for (int i = old + 3; i >= old; --i) free_.push_back(i);
  }
  const int index = free_.back();
  free_.pop_back();
  store(index, row);
  owners_[size_t(index)] = owner;
  ++live_;
  return index;
}

void Fp16Rows::release(int index) {
  owners_[size_t(index)] = -1;
  free_.push_back(index);
  --live_;
}

void Fp16Rows::load(int index, float* out) const {
  // The SIMD row decoder: widening fp16 is exact, so the floats are fp16_to_f32's.
  load_rows(row(index), KVType::f16, out, size_t(dim_), size_t(dim_));
}

void Fp16Rows::store(int index, const float* in) {
  // The SIMD row encoder rounds as f32_to_fp16 does (to nearest, ties to even).
  store_rows(in, row(index), KVType::f16, size_t(dim_), size_t(dim_));
}

void Fp16Rows::reallocate(int rows) {
  // A new vector of exactly `rows` rows, so that bytes() is what is allocated.
  std::vector<uint16_t> data(size_t(rows) * size_t(dim_));
  std::vector<int32_t> owners(size_t(rows), -1);
  const int keep = std::min(rows, size());
  // memcpy with an empty (null) source is undefined even for 0 bytes (UBSan): only when rows move.
  if (keep > 0) std::memcpy(data.data(), rows_.data(), size_t(keep) * size_t(dim_) * sizeof(uint16_t));
  std::copy(owners_.begin(), owners_.begin() + keep, owners.begin());
  rows_.swap(data);
  owners_.swap(owners);
}

void Fp16Rows::trim(std::vector<int32_t>& index_of) {
  if (size() - live_ <= 8) return;
  int out = 0;
  for (int i = 0; i < size(); ++i) {
    const int owner = owners_[size_t(i)];
    if (owner < 0) continue;
    if (i != out) {
      std::memcpy(row(out), row(i), size_t(dim_) * sizeof(uint16_t));
      owners_[size_t(out)] = owner;
      index_of[size_t(owner)] = out;
    }
    ++out;
  }
  reallocate(out);
  free_.clear();
}

void Fp16Rows::clear() {
  rows_ = {};
  owners_ = {};
  free_ = {};
  live_ = 0;
}

}  // namespace squeezekv
