// Random GGUF-layout weight matrices and activations for the ops tests.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "squeezekv/ops/matmul.h"
#include "squeezekv/ops/tensor_type.h"

namespace squeezekv::testing {

// A weight matrix in GGUF layout built with quantize_row (random rows, varied magnitudes).
struct TestMatrix {
  std::vector<uint8_t> bytes;
  WeightMatrix view;
  std::vector<float> dequantized;  // [n_rows, n_cols], for the error bounds
};

inline TestMatrix make_matrix(TensorType type, int64_t n_rows, int64_t n_cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  TestMatrix m;
  const size_t stride = row_bytes(type, n_cols);
  m.bytes.resize(stride * static_cast<size_t>(n_rows));
  m.dequantized.resize(static_cast<size_t>(n_rows * n_cols));
  std::vector<float> row(static_cast<size_t>(n_cols));
  for (int64_t r = 0; r < n_rows; ++r) {
    const float row_scale = 0.05f * static_cast<float>(1 + r % 5);
    for (float& v : row) v = row_scale * normal(rng);
    quantize_row(type, row.data(), m.bytes.data() + static_cast<size_t>(r) * stride, n_cols);
    dequantize_row(type, m.bytes.data() + static_cast<size_t>(r) * stride, m.dequantized.data() + r * n_cols, n_cols);
  }
  m.view = WeightMatrix{m.bytes.data(), type, n_rows, n_cols};
  return m;
}

inline std::vector<float> random_x(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  if (n > 3) x[3] = 9.0f;  // an outlier sets one block's quantisation step
  return x;
}

}  // namespace squeezekv::testing
