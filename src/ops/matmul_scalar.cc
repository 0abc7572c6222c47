// Scalar twins of matvec/matmul: the test oracles. Each row is dequantised with dequantize_row
// and dotted with x in double, so they measure the SIMD kernels' error, not their own.
#include <vector>

#include "squeezekv/base/errors.h"
#include "squeezekv/ops/matmul.h"

namespace squeezekv {

void matmul_scalar(const WeightMatrix& w, const float* x, int64_t n_tok, float* y) {
  require(n_tok >= 0, "n_tok", n_tok, "must be >= 0");
  std::vector<float> row(static_cast<size_t>(w.n_cols));
  const size_t stride = row_bytes(w.type, w.n_cols);
  for (int64_t r = 0; r < w.n_rows; ++r) {
    dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * stride, row.data(), w.n_cols);
    for (int64_t t = 0; t < n_tok; ++t) {
      double sum = 0.0;
      for (int64_t i = 0; i < w.n_cols; ++i) {
        sum += static_cast<double>(row[static_cast<size_t>(i)]) * static_cast<double>(x[t * w.n_cols + i]);
      }
      y[t * w.n_rows + r] = static_cast<float>(sum);
    }
  }
}

void matvec_scalar(const WeightMatrix& w, const float* x, float* y) { matmul_scalar(w, x, 1, y); }

}  // namespace squeezekv
