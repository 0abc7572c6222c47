// matvec/matmul (SIMD, every compiled target) against their scalar twins, for every weight type,
// many shapes, 1 and 2 threads, within the tolerances stated in matmul.h.
#include "squeezekv/ops/matmul.h"
#include "squeezekv/ops/model_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ops/hwy_targets.h"
#include "ops/test_matrix.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/ops/tensor_type.h"
#include "squeezekv/ops/thread_pool.h"

namespace squeezekv {
namespace {

using testing::make_matrix;
using testing::random_x;
using testing::TestMatrix;

// Every type the traits table computes on (tests/ops/quant_test.cc's WeightTypesFromTheTable
// lists them), so that a new weight type is checked against its scalar twin on every target.
const std::span<const TensorType> all_types = weight_types();

bool is_quantized(TensorType type) { return block_layout(type).block_elems > 1; }

std::string name(TensorType type) { return std::string(tensor_type_name(static_cast<uint32_t>(type))); }

// Column counts: one block, odd block counts, and for float types lengths off any vector size.
std::vector<int64_t> column_counts(TensorType type) {
  switch (block_layout(type).block_elems) {
    case 1:
      return {1, 7, 32, 100, 257, 1024};
    case 32:
      return {32, 96, 160, 544, 1024};
    default:
      return {256, 768, 2304};
  }
}

// matmul.h's bound on |y_simd - y_exact| for row r and token x.
double error_bound(const TestMatrix& m, int64_t r, const float* x) {
  const int64_t n = m.view.n_cols;
  const float* w = m.dequantized.data() + r * n;
  double bound = 0.0;
  for (int64_t i = 0; i < n; ++i) bound += 1e-5 * std::fabs(static_cast<double>(w[i]) * x[i]);
  if (is_quantized(m.view.type)) {
    for (int64_t b = 0; b < n / 32; ++b) {
      double sum_w = 0.0, amax = 0.0;
      for (int64_t i = b * 32; i < b * 32 + 32; ++i) {
        sum_w += std::fabs(w[i]);
        amax = std::max(amax, static_cast<double>(std::fabs(x[i])));
      }
      bound += sum_w * amax / 254.0;
    }
  }
  return bound + 1e-30;
}

TEST(ops_matmul, MatvecMatchesScalarTwin) {
  ThreadPool pool2(2);
  testing::for_each_target([&] {
    uint32_t seed = 1;
    for (const TensorType type : all_types) {
      for (const int64_t n_cols : column_counts(type)) {
        for (const int64_t n_rows : {1, 3, 7, 33}) {
          SCOPED_TRACE(name(type) + " rows " + std::to_string(n_rows) + " cols " + std::to_string(n_cols));
          const TestMatrix m = make_matrix(type, n_rows, n_cols, ++seed);
          // x starts one float past an allocation boundary: no alignment is assumed.
          std::vector<float> x_storage(static_cast<size_t>(n_cols) + 1);
          const std::vector<float> x_values = random_x(n_cols, ++seed);
          std::memcpy(x_storage.data() + 1, x_values.data(), x_values.size() * sizeof(float));
          const float* x = x_storage.data() + 1;

          std::vector<float> expected(static_cast<size_t>(n_rows)), one(static_cast<size_t>(n_rows)),
              two(static_cast<size_t>(n_rows));
          matvec_scalar(m.view, x, expected.data());
          matvec(m.view, x, one.data(), nullptr);
          matvec(m.view, x, two.data(), &pool2);
          for (int64_t r = 0; r < n_rows; ++r) {
            ASSERT_NEAR(one[r], expected[r], error_bound(m, r, x)) << "row " << r;
            ASSERT_EQ(one[r], two[r]) << "row " << r << ": thread count changed the result";
          }
        }
      }
    }
  });
}

// Bit for bit, whatever the path: the row kernels, the 4-token row kernels and (on VNNI targets)
// the 16-row x 4-token prompt tiles, with row counts that leave partial tiles and token counts
// that leave every tile remainder (1, 2 and 3 tokens; 127 crosses the 16-token row tile too), and
// column counts with and without blocks after the last run of 8.
TEST(ops_matmul, MatmulEqualsMatvecPerToken) {
  ThreadPool pool2(2);
  testing::for_each_target([&] {
    uint32_t seed = 100;
    for (const TensorType type : all_types) {
      // Q8_0: 3 blocks (no run of 8) and 17 (two runs and one more); K-quants 3 and 9 super-blocks.
      const std::vector<int64_t> counts = column_counts(type);
      for (const int64_t n_cols : {counts[1], counts[std::min<size_t>(3, counts.size() - 1)]}) {
        for (const auto& [n_rows, n_tok] :
             {std::pair<int64_t, int64_t>{9, 1}, {9, 3}, {9, 17}, {16, 4}, {33, 8}, {47, 15}, {17, 127}, {70, 31}}) {
          SCOPED_TRACE(name(type) + " cols " + std::to_string(n_cols) + " rows " + std::to_string(n_rows) + " tokens " +
                       std::to_string(n_tok));
          const TestMatrix m = make_matrix(type, n_rows, n_cols, ++seed);
          const std::vector<float> x = random_x(n_tok * n_cols, ++seed);
          std::vector<float> batch(static_cast<size_t>(n_tok * n_rows)), batch2(batch.size()), scalar(batch.size());
          matmul(m.view, x.data(), n_tok, batch.data(), nullptr);
          matmul(m.view, x.data(), n_tok, batch2.data(), &pool2);
          matmul_scalar(m.view, x.data(), n_tok, scalar.data());
          for (int64_t t = 0; t < n_tok; ++t) {
            std::vector<float> single(static_cast<size_t>(n_rows));
            matvec(m.view, x.data() + t * n_cols, single.data(), nullptr);
            for (int64_t r = 0; r < n_rows; ++r) {
              const size_t k = static_cast<size_t>(t * n_rows + r);
              ASSERT_EQ(batch[k], single[static_cast<size_t>(r)]) << "token " << t << " row " << r;
              ASSERT_EQ(batch[k], batch2[k]) << "token " << t << " row " << r;
              ASSERT_NEAR(batch[k], scalar[k], error_bound(m, r, x.data() + t * n_cols));
            }
          }
        }
      }
    }
  });
}

// The fused entry points (one parallel region for q/k/v, gate/up with SwiGLU) write exactly what
// separate single-threaded matmuls write, with shapes large enough that the pool really splits
// them (above kMatmulParallelMacs) and row counts that do not divide evenly into tasks.
TEST(ops_matmul, FusedProductsEqualSeparateMatmuls) {
  ThreadPool pool2(2), pool3(3);
  uint32_t seed = 500;
  for (const TensorType type : all_types) {
    const int64_t n_cols = 1024;
    for (const int64_t n_tok : {1, 17}) {
      SCOPED_TRACE(name(type) + " tokens " + std::to_string(n_tok));
      const TestMatrix a = make_matrix(type, 301, n_cols, ++seed);
      const TestMatrix b = make_matrix(type, 77, n_cols, ++seed);
      const TestMatrix c = make_matrix(type, 130, n_cols, ++seed);
      const std::vector<float> x = random_x(n_tok * n_cols, ++seed);
      auto alone = [&](const TestMatrix& m) {
        std::vector<float> y(static_cast<size_t>(n_tok * m.view.n_rows));
        matmul(m.view, x.data(), n_tok, y.data(), nullptr);
        return y;
      };
      const auto ya = alone(a), yb = alone(b), yc = alone(c);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
        std::vector<float> fa(ya.size()), fb(yb.size()), fc(yc.size());
        const MatmulOutput outs[3] = {{&a.view, fa.data()}, {&b.view, fb.data()}, {&c.view, fc.data()}};
        matmul_many(outs, x.data(), n_tok, pool);
        EXPECT_EQ(fa, ya);
        EXPECT_EQ(fb, yb);
        EXPECT_EQ(fc, yc);
      }
      const TestMatrix up = make_matrix(type, 301, n_cols, ++seed);
      std::vector<float> expected = ya;
      const auto yu = alone(up);
      swiglu(expected.data(), yu.data(), static_cast<int64_t>(expected.size()), expected.data());
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
        std::vector<float> gate(ya.size()), scratch(ya.size());
        matmul_swiglu(a.view, up.view, x.data(), n_tok, gate.data(), scratch.data(), pool);
        EXPECT_EQ(gate, expected);
      }
    }
  }
}

// With x exactly representable in 8 bits per activation block (integers times a power of two,
// each block holding 127; the blocks are 32 values, 256 for K-quants, as ggml's q8_0 and q8_K),
// the integer kernels must agree with the exact dot to f32 rounding: any slip in decoding
// nibbles, high bits, scales or mins would show far above that.
TEST(ops_matmul, ExactActivationsGiveExactDots) {
  testing::for_each_target([&] {
    uint32_t seed = 500;
    for (const TensorType type :
         {TensorType::q8_0, TensorType::q4_0, TensorType::q4_1, TensorType::q5_0, TensorType::q4_k, TensorType::q6_k}) {
      const int64_t n_cols = column_counts(type).back();
      SCOPED_TRACE(name(type));
      const TestMatrix m = make_matrix(type, 5, n_cols, ++seed);
      std::mt19937 rng(++seed);
      std::uniform_int_distribution<int> level(-127, 127);
      std::vector<float> x(static_cast<size_t>(n_cols));
      for (int64_t i = 0; i < n_cols; ++i) {
        x[static_cast<size_t>(i)] = i % 32 == 5 ? 127.0f : static_cast<float>(level(rng));
        const int64_t block = block_layout(type).block_elems == 256 ? 256 : 32;
        x[static_cast<size_t>(i)] *= std::ldexp(1.0f, static_cast<int>(i / block % 3) - 4);
      }
      std::vector<float> y(5), expected(5);
      matvec(m.view, x.data(), y.data());
      matvec_scalar(m.view, x.data(), expected.data());
      for (int64_t r = 0; r < 5; ++r) {
        double magnitude = 0.0;
        for (int64_t i = 0; i < n_cols; ++i)
          magnitude += std::fabs(m.dequantized[static_cast<size_t>(r * n_cols + i)] * x[static_cast<size_t>(i)]);
        ASSERT_NEAR(y[r], expected[r], 1e-5 * magnitude) << "row " << r;
      }
    }
  });
}

// Q5_0 rows against ggml's vec_dot_q5_0_q8_0 written out in the test: x rounded to Q8_0 blocks
// as activation_q8.h states (x8 = round-half-even(x * 127 / amax), d_x = amax / 127 in fp16),
// then per block d_w * d_x * sum((q - 16) * x8) with q decoded from the bytes here, summed in
// double. Row
// lengths of one block, of two runs of 8 blocks and 4 more (the x86 kernel's tail) and of 64
// blocks; every compiled target this CPU runs.
TEST(ops_matmul, Q5_0RowsMatchTheReferenceDot) {
  testing::for_each_target([&] {
    uint32_t seed = 900;
    for (const int64_t n_cols : {32, 640, 2048}) {
      SCOPED_TRACE("cols " + std::to_string(n_cols));
      constexpr int64_t n_rows = 7;
      const TestMatrix m = make_matrix(TensorType::q5_0, n_rows, n_cols, ++seed);
      const std::vector<float> x = random_x(n_cols, ++seed);
      auto half = [](const uint8_t* p) {
        float v = 0.0f;
        dequantize_row(TensorType::f16, p, &v, 1);
        return static_cast<double>(v);
      };
      std::vector<int> x8(static_cast<size_t>(n_cols));
      std::vector<double> x_scale(static_cast<size_t>(n_cols / 32));
      for (int64_t b = 0; b < n_cols / 32; ++b) {
        float amax = 0.0f;
        for (int64_t i = b * 32; i < b * 32 + 32; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(i)]));
        ASSERT_GT(amax, 0.0f);
        for (int64_t i = b * 32; i < b * 32 + 32; ++i) {
          x8[static_cast<size_t>(i)] = static_cast<int>(std::nearbyint(x[static_cast<size_t>(i)] * (127.0f / amax)));
        }
        const float s = amax / 127.0f;
        std::vector<uint8_t> s16(2);
        quantize_row(TensorType::f16, &s, s16.data(), 1);
        x_scale[static_cast<size_t>(b)] = half(s16.data());
      }
      std::vector<float> y(n_rows);
      matvec(m.view, x.data(), y.data());
      const size_t stride = row_bytes(TensorType::q5_0, n_cols);
      for (int64_t r = 0; r < n_rows; ++r) {
        double expected = 0.0, magnitude = 0.0;
        for (int64_t b = 0; b < n_cols / 32; ++b) {
          const uint8_t* wb = m.bytes.data() + static_cast<size_t>(r) * stride + static_cast<size_t>(b) * 22;
          const uint32_t qh = uint32_t{wb[2]} | uint32_t{wb[3]} << 8 | uint32_t{wb[4]} << 16 | uint32_t{wb[5]} << 24;
          int64_t dot = 0, dot_abs = 0;
          for (int j = 0; j < 32; ++j) {
            const int nibble = j < 16 ? wb[6 + j] & 15 : wb[6 + j - 16] >> 4;
            const int q = nibble | static_cast<int>((qh >> j) & 1u) << 4;
            const int xj = x8[static_cast<size_t>(b * 32 + j)];
            dot += (q - 16) * xj;
            dot_abs += std::abs((q - 16) * xj);
          }
          const double scale = half(wb) * x_scale[static_cast<size_t>(b)];
          expected += scale * static_cast<double>(dot);
          magnitude += std::fabs(scale) * static_cast<double>(dot_abs);
        }
        ASSERT_GT(magnitude, 0.0);
        ASSERT_NEAR(y[static_cast<size_t>(r)], expected, 1e-5 * magnitude) << "row " << r;
      }
    }
  });
}

TEST(ops_matmul, RejectsBadShapes) {
  std::vector<uint8_t> bytes(1024);
  std::vector<float> x(64), y(4);
  EXPECT_THROW(matvec(WeightMatrix{bytes.data(), TensorType::q4_0, 2, 48}, x.data(), y.data()), InvalidArgument);
  EXPECT_THROW(matvec(WeightMatrix{bytes.data(), static_cast<TensorType>(13), 2, 256}, x.data(), y.data()),
               InvalidArgument);
  EXPECT_THROW(matmul(WeightMatrix{bytes.data(), TensorType::f32, 2, 4}, x.data(), -1, y.data()), InvalidArgument);
  // Empty shapes are fine and write nothing.
  matvec(WeightMatrix{bytes.data(), TensorType::f32, 0, 4}, x.data(), y.data());
  matmul(WeightMatrix{bytes.data(), TensorType::f32, 2, 4}, x.data(), 0, y.data());
}

}  // namespace
}  // namespace squeezekv
