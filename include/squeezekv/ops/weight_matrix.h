// A weight matrix as GGUF stores it, read in place: what every matrix product (matmul.h) and the
// repacked layouts (repacked_weights.h) take.
#pragma once

#include <cstdint>

#include "squeezekv/ops/tensor_type.h"

namespace squeezekv {

// A weight matrix in GGUF layout: n_rows rows (GGUF ne1) of n_cols elements (ne0) each,
// row-major and contiguous, so row r starts at data + r * row_bytes(type, n_cols).
struct WeightMatrix {
  const void* data = nullptr;
  TensorType type = TensorType::f32;
  int64_t n_rows = 0;
  int64_t n_cols = 0;  // a multiple of block_layout(type).block_elems
  // Optional: the same rows in the tiles' layout (repacked_weights.h), read instead of data by the
  // targets that can; results are the same bit for bit either way. Not owned.
  const void* repacked = nullptr;
};

}  // namespace squeezekv
