// The repacked layouts (repacked_weights.h) written by plain copies, for the SIMD targets without
// the AVX-512 transposes (the AVX2 half-group tiles read the same bytes). Each weight type's file
// gives where a unit of a row goes; this walks the groups.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "squeezekv/ops/repacked_weights.h"
#include "squeezekv/ops/tensor_type.h"
#include "squeezekv/ops/weight_matrix.h"

namespace squeezekv::repacked {

// Groups [g0, g1) of w's layout into out: for each of a group's 16 lanes (rows past the matrix
// repeat its last, as the SIMD writers' do) and each unit j (a block or super-block, as
// block_layout has it) of the lane's GGUF row, put(unit, group, j, lane) copies the unit's bytes to
// their places in the group; the bytes after the group's 16 rows' worth are zeroed.
template <class Put>
void repack_groups_by_copies(const WeightMatrix& w, int64_t g0, int64_t g1, uint8_t* out, Put put) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const auto unit_bytes = static_cast<size_t>(block_layout(w.type).block_bytes);
  const size_t stride = row_bytes(w.type, w.n_cols), group_bytes = repacked_group_bytes(w.type, w.n_cols);
  const size_t n_units = stride / unit_bytes, used = kRepackedGroupRows * stride;
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* group = out + static_cast<size_t>(g) * group_bytes;
    for (size_t lane = 0; lane < static_cast<size_t>(kRepackedGroupRows); ++lane) {
      const int64_t row = std::min(g * kRepackedGroupRows + static_cast<int64_t>(lane), w.n_rows - 1);
      const uint8_t* units = base + static_cast<size_t>(row) * stride;
      for (size_t j = 0; j < n_units; ++j) put(units + j * unit_bytes, group, j, lane);
    }
    std::memset(group + used, 0, group_bytes - used);
  }
}

}  // namespace squeezekv::repacked
