// Matrix-vector and matrix-matrix products against weights stored as GGUF stores them, read in
// place (e.g. straight from the memory-mapped file): no copy of the matrix is ever made.
//
// Accuracy (checked by tests/ops/matmul_test.cc against the scalar twins, which dequantise each
// row and accumulate its dot in double):
//  - F32, F16, BF16 weights: products in f32 with SIMD partial sums, so
//    |y - y_exact| <= 1e-5 * sum_i |w_i * x_i|.
//  - Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q6_K weights: as ggml's vec_dot_*_q8_*, x is first quantised to
//    8 bits (x_i ~= s_b * q_i) exactly as ggml does: per 32-element block with s_b = max_b |x| / 127
//    in f16 (q8_0, q8_1) for Q8_0, Q4_0, Q4_1 and Q5_0, per 256-element block in f32 (q8_K) for Q4_K and
//    Q6_K; each block's dot is exact in integers, so, with b ranging over those blocks of the row,
//    |y - y_exact| <= sum_b (sum_{i in b} |w_i|) * max_{i in b} |x_i| / 254 * (1 + 2^-10)
//                     + 1e-5 * sum_i |w_i * x_i|.
// Each output is computed the same way whatever the thread count or batch size: results are
// bit-identical for 1 or N threads, and matmul row t equals matvec of token t.
#pragma once

#include <cstdint>
#include <span>

#include "squeezekv/ops/tensor_type.h"
#include "squeezekv/ops/weight_matrix.h"  // callers of the products name WeightMatrix

namespace squeezekv {

class ThreadPool;

// y[r] = dot(row r of w, x) for r < n_rows; x has n_cols floats and must not overlap y. Rows are
// split across pool (nullptr: the calling thread only). Throws InvalidArgument on a bad shape.
void matvec(const WeightMatrix& w, const float* x, float* y, ThreadPool* pool = nullptr);

// A batch of n_tok tokens: x is [n_tok, n_cols] row-major, y is [n_tok, n_rows] row-major,
// y[t * n_rows + r] = dot(row r of w, x + t * n_cols). Each weight row is reused across tokens.
void matmul(const WeightMatrix& w, const float* x, int64_t n_tok, float* y, ThreadPool* pool = nullptr);

// Several products of the same x (q, k and v of one layer) in one parallel region: x is quantised
// once and the pool synchronises once instead of once per matrix. Every y is exactly what matmul
// would write. All matrices must have the same n_cols.
struct MatmulOutput {
  const WeightMatrix* w = nullptr;
  float* y = nullptr;  // [n_tok, w->n_rows]
};
void matmul_many(std::span<const MatmulOutput> outputs, const float* x, int64_t n_tok, ThreadPool* pool = nullptr);

// The first half of a SwiGLU MLP in one parallel region: gate_out = silu(gate x) * (up x), with
// up_out [n_tok, n_rows] as scratch. Bit-identical to two matmuls followed by swiglu().
void matmul_swiglu(const WeightMatrix& gate, const WeightMatrix& up, const float* x, int64_t n_tok, float* gate_out,
                   float* up_out, ThreadPool* pool = nullptr);

// Products with fewer multiply-adds than this (rows x cols x tokens) run on the calling thread:
// below it a parallel region's hand-off costs more than it saves.
inline constexpr int64_t kMatmulParallelMacs = int64_t(1) << 18;

// Scalar twins, the test oracles: dequantise_row each row, then a double-accumulated dot with
// the unquantised x. Slow; single-threaded.
void matvec_scalar(const WeightMatrix& w, const float* x, float* y);
void matmul_scalar(const WeightMatrix& w, const float* x, int64_t n_tok, float* y);

}  // namespace squeezekv
