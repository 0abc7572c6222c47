// Dots of queries with cached rows and weighted sums of rows: each format's kernels, picked from
// its row of the formats' table, and the scalar twins the tests compare them with.
#include <vector>

#include "ops/kv_format_kernels.h"
#include "squeezekv/ops/kv_rows.h"

namespace squeezekv {

// One query, four rows in flight; the group kernel's bits (its contract).
void row_dots(const float* q, const void* rows, KVType type, size_t n_rows, size_t head_dim, float* out) {
  kv_row_kernels(type).dots_group(q, 1, head_dim, rows, n_rows, head_dim, out, 1);
}

void rows_weighted_sum(const float* w, const void* rows, KVType type, size_t n_rows, size_t head_dim, float* out) {
  kv_row_kernels(type).weighted_sum_group(w, 1, n_rows, rows, n_rows, head_dim, out, head_dim);
}

void row_dots_group(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type, size_t n_rows,
                    size_t head_dim, float* out, size_t ld_out) {
  kv_row_kernels(type).dots_group(q, n_q, ld_q, rows, n_rows, head_dim, out, ld_out);
}

void rows_weighted_sum_group(const float* w, size_t n_w, size_t ld_w, const void* rows, KVType type, size_t n_rows,
                             size_t head_dim, float* out, size_t ld_out) {
  kv_row_kernels(type).weighted_sum_group(w, n_w, ld_w, rows, n_rows, head_dim, out, ld_out);
}

// The scalar twins: each row decoded by the format's scalar codec, sums in double.

void row_dots_scalar(const float* q, const void* rows, KVType type, size_t n_rows, size_t head_dim, float* out) {
  const KVRowKernels& kernels = kv_row_kernels(type);
  const size_t rb = kv_row_bytes(type, head_dim);
  std::vector<float> row(head_dim);
  for (size_t j = 0; j < n_rows; ++j) {
    kernels.load_row_scalar(static_cast<const uint8_t*>(rows) + j * rb, head_dim, row.data());
    double acc = 0;
    for (size_t i = 0; i < head_dim; ++i) acc += double(q[i]) * row[i];
    out[j] = static_cast<float>(acc);
  }
}

void rows_weighted_sum_scalar(const float* w, const void* rows, KVType type, size_t n_rows, size_t head_dim,
                              float* out) {
  const KVRowKernels& kernels = kv_row_kernels(type);
  const size_t rb = kv_row_bytes(type, head_dim);
  std::vector<double> acc(out, out + head_dim);
  std::vector<float> row(head_dim);
  for (size_t j = 0; j < n_rows; ++j) {
    kernels.load_row_scalar(static_cast<const uint8_t*>(rows) + j * rb, head_dim, row.data());
    for (size_t i = 0; i < head_dim; ++i) acc[i] += double(w[j]) * row[i];
  }
  for (size_t i = 0; i < head_dim; ++i) out[i] = static_cast<float>(acc[i]);
}

void row_dots_group_scalar(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type, size_t n_rows,
                           size_t head_dim, float* out, size_t ld_out) {
  for (size_t g = 0; g < n_q; ++g) row_dots_scalar(q + g * ld_q, rows, type, n_rows, head_dim, out + g * ld_out);
}

void rows_weighted_sum_group_scalar(const float* w, size_t n_w, size_t ld_w, const void* rows, KVType type,
                                    size_t n_rows, size_t head_dim, float* out, size_t ld_out) {
  for (size_t g = 0; g < n_w; ++g) {
    rows_weighted_sum_scalar(w + g * ld_w, rows, type, n_rows, head_dim, out + g * ld_out);
  }
}

}  // namespace squeezekv
