// Every row of the K/V formats' table (squeezekv/ops/kv_format.h): the names and sizes callers
// read from it, and each per-token format's kernels against their scalar twins on every Highway
// target. A new format's row is tested here without a line of its own; its own test checks its
// bytes (tests/ops/kv_quant_test.cc for q8_0 and q4_0).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "hwy_targets.h"
#include "ops/kv_format_kernels.h"
#include "rope_turns.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/ops/kv_rows.h"
#include "squeezekv/ops/model_ops.h"
#include "test_util.h"

namespace squeezekv {
namespace {

TEST(KVFormat, RowsGiveTheNamesAndSizes) {
  EXPECT_EQ(kKVTypeNames.size(), kKVFormatCount);
  for (const KVFormat& f : kKVFormats) {
    SCOPED_TRACE(std::string(f.name));
    EXPECT_EQ(find_kv_type(f.name), f.type);
    EXPECT_EQ(kKVTypeNames[size_t(f.type)], f.name);
    EXPECT_EQ(int(kv_float(f.type)) + int(kv_quantized(f.type)) + int(kv_kivi(f.type)), 1);
    EXPECT_EQ(f.kernels == nullptr, kv_kivi(f.type));
    if (kv_kivi(f.type)) continue;
    for (size_t dim : {8u, 32u, 64u, 128u}) {
      if (kv_type_unfit(f.type, dim)[0] != '\0') continue;
      // Bits per value and row bytes say the same.
      EXPECT_DOUBLE_EQ(kv_bits_per_value(f.type, dim) * double(dim), 8.0 * double(kv_row_bytes(f.type, dim)));
      EXPECT_EQ(dim % kv_block_size(f.type, dim), 0u);
    }
  }
  EXPECT_EQ(kv_type_names_text(), "f16, f32, q8_0, q4_0, kivi2 or kivi4");
  EXPECT_FALSE(find_kv_type("q5_0").has_value());
  EXPECT_FALSE(find_kv_type("").has_value());
}

TEST(KVFormat, GroupedFormatsHaveNoRowKernels) {
  const std::vector<float> x(32, 1.0f);
  std::vector<uint8_t> bytes(256);
  for (const KVFormat& f : kKVFormats) {
    if (f.layout != KVLayout::grouped) continue;
    EXPECT_EQ(kv_row_bytes(f.type, 32), 0u);
    EXPECT_THROW(kv_row_kernels(f.type), InvalidArgument);
    EXPECT_THROW(store_rows(x.data(), bytes.data(), f.type, 32, 32), InvalidArgument);
  }
}

// Bound on a float sum's distance from the exact one: n * FLT_EPSILON of the sum of its terms'
// magnitudes, however the terms are grouped and fused.
double sum_bound(size_t n, double magnitudes) { return double(n) * FLT_EPSILON * magnitudes + 1e-30; }

void check_format(KVType type, size_t dim, size_t rows) {
  const KVRowKernels& kernels = kv_row_kernels(type);
  const size_t rb = kv_row_bytes(type, dim);
  std::vector<uint8_t> bytes(rows * rb);
  store_rows(test::normal(rows * dim, dim * 17 + rows, 2.0f).data(), bytes.data(), type, rows * dim, dim);
  // The SIMD decoder gives the scalar decoder's floats.
  std::vector<float> simd(rows * dim), x(rows * dim);
  load_rows(bytes.data(), type, simd.data(), rows * dim, dim);
  for (size_t r = 0; r < rows; ++r) kernels.load_row_scalar(bytes.data() + r * rb, dim, x.data() + r * dim);
  for (size_t i = 0; i < rows * dim; ++i) ASSERT_EQ(simd[i], x[i]) << i;
  for (size_t n_q : {1u, 3u, 4u, 6u}) {
    SCOPED_TRACE("n_q " + std::to_string(n_q));
    const size_t ld_q = dim + 3, ld_out = rows + 5;
    const auto q = test::normal(n_q * ld_q, rows * 7 + n_q);
    std::vector<float> fast(n_q * ld_out), slow(n_q * ld_out), single(rows);
    row_dots_group(q.data(), n_q, ld_q, bytes.data(), type, rows, dim, fast.data(), ld_out);
    row_dots_group_scalar(q.data(), n_q, ld_q, bytes.data(), type, rows, dim, slow.data(), ld_out);
    for (size_t g = 0; g < n_q; ++g) {
      row_dots(q.data() + g * ld_q, bytes.data(), type, rows, dim, single.data());
      for (size_t j = 0; j < rows; ++j) {
        double magnitudes = 0;
        for (size_t i = 0; i < dim; ++i) magnitudes += std::fabs(double(q[g * ld_q + i]) * x[j * dim + i]);
        ASSERT_NEAR(fast[g * ld_out + j], slow[g * ld_out + j], sum_bound(dim + 1, magnitudes)) << g << " " << j;
        ASSERT_EQ(fast[g * ld_out + j], single[j]) << "row_dots_group's contract: row_dots' bits";
      }
    }
    // Weighted sums onto nonzero outputs, some weights zero.
    auto w = test::normal(n_q * ld_out, rows * 5 + n_q);
    for (size_t j = 0; j < w.size(); j += 3) w[j] = 0.0f;
    const size_t ld_sum = dim + 2;
    const auto start = test::normal(n_q * ld_sum, dim + n_q);
    std::vector<float> sum_fast = start, sum_slow = start;
    rows_weighted_sum_group(w.data(), n_q, ld_out, bytes.data(), type, rows, dim, sum_fast.data(), ld_sum);
    rows_weighted_sum_group_scalar(w.data(), n_q, ld_out, bytes.data(), type, rows, dim, sum_slow.data(), ld_sum);
    for (size_t g = 0; g < n_q; ++g) {
      std::vector<float> sum_single(start.begin() + std::ptrdiff_t(g * ld_sum),
                                    start.begin() + std::ptrdiff_t(g * ld_sum + dim));
      rows_weighted_sum(w.data() + g * ld_out, bytes.data(), type, rows, dim, sum_single.data());
      for (size_t i = 0; i < dim; ++i) {
        double magnitudes = std::fabs(start[g * ld_sum + i]);
        for (size_t j = 0; j < rows; ++j) magnitudes += std::fabs(double(w[g * ld_out + j]) * x[j * dim + i]);
        ASSERT_NEAR(sum_fast[g * ld_sum + i], sum_slow[g * ld_sum + i], sum_bound(rows + 2, magnitudes))
            << g << " " << i;
        ASSERT_EQ(sum_fast[g * ld_sum + i], sum_single[i]) << "the group's sums are the single kernel's bits";
      }
    }
    // Keys turned back by their shifts: the fused dots are turning then dotting, bit for bit, and
    // the turn is its scalar twin's.
    for (const bool neox : {false, true}) {
      const size_t n_rot = neox && dim % 4 != 0 ? dim - dim % 4 : dim;
      if (n_rot == 0) continue;
      constexpr size_t kShifts = 40;
      const std::vector<float> turns = test::rope_turns(kShifts, n_rot, neox);
      std::vector<int32_t> shifts(rows);
      for (size_t j = 0; j < rows; ++j) shifts[j] = int32_t((j * 13 + 5) % kShifts) - 2;
      std::vector<float> turned(rows * dim), turned_slow(rows * dim), dots(n_q * ld_out), want(n_q * ld_out);
      rotate_rows_back(bytes.data(), type, shifts.data(), rows, dim, n_rot, neox, turns.data(), turned.data());
      rotate_rows_back_scalar(bytes.data(), type, shifts.data(), rows, dim, n_rot, neox, turns.data(),
                              turned_slow.data());
      for (size_t i = 0; i < rows * dim; ++i) ASSERT_EQ(turned[i], turned_slow[i]) << "neox " << neox << " " << i;
      row_dots_rotated(q.data(), n_q, ld_q, bytes.data(), type, shifts.data(), rows, dim, n_rot, neox, turns.data(),
                       dots.data(), ld_out);
      row_dots_group(q.data(), n_q, ld_q, turned.data(), KVType::f32, rows, dim, want.data(), ld_out);
      for (size_t g = 0; g < n_q; ++g) {
        for (size_t j = 0; j < rows; ++j) ASSERT_EQ(dots[g * ld_out + j], want[g * ld_out + j]) << "neox " << neox;
      }
    }
  }
}

TEST(KVFormat, EveryRowFormatsKernelsMatchTheirScalarTwinsOnEveryTarget) {
  testing::for_each_target([] {
    for (const KVFormat& f : kKVFormats) {
      if (f.kernels == nullptr) continue;
      for (size_t dim : {2u, 6u, 8u, 16u, 24u, 32u, 64u, 128u}) {
        if (kv_type_unfit(f.type, dim)[0] != '\0') continue;
        for (size_t rows : {1u, 5u, 33u}) {
          SCOPED_TRACE(std::string(f.name) + " dim " + std::to_string(dim) + " rows " + std::to_string(rows));
          check_format(f.type, dim, rows);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  });
}

}  // namespace
}  // namespace squeezekv
