// The K/V row kernels against their scalar twins, over many lengths and misalignments.
#include "squeezekv/base/fp16.h"
#include "squeezekv/ops/kv_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "hwy_targets.h"
#include "rope_turns.h"
#include "squeezekv/methods/kv_cache_config.h"
#include "squeezekv/ops/model_ops.h"
#include "test_util.h"

namespace squeezekv {
namespace {

std::vector<std::byte> stored(const std::vector<float>& x, KVType type, size_t offset_elems) {
  std::vector<std::byte> out((x.size() + offset_elems) * kv_type_size(type));
  store_rows(x.data(), out.data() + offset_elems * kv_type_size(type), type, x.size());
  return out;
}

// rows x dim normal values stored as `type`'s rows.
std::vector<std::byte> stored_rows(KVType type, size_t rows, size_t dim, uint64_t seed) {
  std::vector<std::byte> out(rows * kv_row_bytes(type, dim));
  store_rows(test::normal(rows * dim, seed).data(), out.data(), type, rows * dim, dim);
  return out;
}

TEST(KVRows, F16RoundTripIsRoundToNearestEven) {
  EXPECT_EQ(f32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f32_to_fp16(1.0f + 1.0f / 2048), 0x3C00);  // halfway: to even
  for (size_t n : {1u, 7u, 16u, 33u, 100u}) {
    const auto x = test::normal(n, n);
    std::vector<uint16_t> h(n);
    store_rows(x.data(), h.data(), KVType::f16, n);
    std::vector<float> back(n);
    load_rows(h.data(), KVType::f16, back.data(), n);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(h[i], f32_to_fp16(x[i]));
      EXPECT_EQ(back[i], fp16_to_f32(h[i]));
    }
  }
}

TEST(KVRows, RowDotsAndWeightedSumsMatchTheScalarTwins) {
  for (KVType type : {KVType::f16, KVType::f32}) {
    for (size_t dim : {1u, 3u, 4u, 8u, 15u, 16u, 17u, 31u, 32u, 33u, 64u, 128u, 130u}) {
      for (size_t rows : {1u, 2u, 3u, 4u, 5u, 9u, 40u}) {
        for (size_t misalign : {0u, 1u, 3u}) {
          const auto k = test::normal(rows * dim, dim * 131 + rows);
          const auto buf = stored(k, type, misalign);
          const void* base = buf.data() + misalign * kv_type_size(type);
          std::vector<float> q = test::normal(dim + misalign, rows);
          const float* qp = q.data() + misalign;
          std::vector<float> fast(rows), slow(rows);
          row_dots(qp, base, type, rows, dim, fast.data());
          row_dots_scalar(qp, base, type, rows, dim, slow.data());
          for (size_t j = 0; j < rows; ++j) {
            EXPECT_NEAR(fast[j], slow[j], 1e-5 * (1 + std::abs(slow[j])) * std::sqrt(double(dim)));
          }
          std::vector<float> w = test::normal(rows, 7);
          w[0] = 0.0f;
          std::vector<float> out_fast(dim, 0.5f), out_slow(dim, 0.5f);
          rows_weighted_sum(w.data(), base, type, rows, dim, out_fast.data());
          rows_weighted_sum_scalar(w.data(), base, type, rows, dim, out_slow.data());
          for (size_t i = 0; i < dim; ++i) {
            EXPECT_NEAR(out_fast[i], out_slow[i], 1e-5 * (1 + std::abs(out_slow[i])) * std::sqrt(double(rows)));
          }
        }
      }
    }
  }
}

// The GQA-group kernels, on every target: against the scalar twins, and bit-identical to the
// one-query kernels (the engine relies on that: grouping heads must not change attention).
TEST(KVRows, GroupKernelsMatchTheScalarTwinsAndTheSingleKernels) {
  testing::for_each_target([] {
    for (KVType type : {KVType::f16, KVType::f32}) {
      for (size_t dim : {1u, 4u, 8u, 15u, 16u, 17u, 33u, 64u, 128u}) {
        for (size_t rows : {1u, 3u, 4u, 5u, 40u}) {
          for (size_t n_q : {1u, 2u, 3u, 4u, 5u, 8u}) {
            for (size_t misalign : {0u, 1u}) {
              const auto k = test::normal(rows * dim, dim * 131 + rows);
              const auto buf = stored(k, type, misalign);
              const void* base = buf.data() + misalign * kv_type_size(type);
              const size_t ld_q = dim + 3, ld_out = rows + 2;
              const auto q = test::normal(n_q * ld_q + misalign, n_q + dim);
              const float* qp = q.data() + misalign;
              std::vector<float> fast(n_q * ld_out), slow(n_q * ld_out), single(rows);
              row_dots_group(qp, n_q, ld_q, base, type, rows, dim, fast.data(), ld_out);
              row_dots_group_scalar(qp, n_q, ld_q, base, type, rows, dim, slow.data(), ld_out);
              for (size_t g = 0; g < n_q; ++g) {
                row_dots(qp + g * ld_q, base, type, rows, dim, single.data());
                for (size_t j = 0; j < rows; ++j) {
                  EXPECT_EQ(fast[g * ld_out + j], single[j]);
                  EXPECT_NEAR(fast[g * ld_out + j], slow[g * ld_out + j],
                              1e-5 * (1 + std::abs(slow[g * ld_out + j])) * std::sqrt(double(dim)));
                }
              }
              const size_t ld_w = rows + 1;
              std::vector<float> w = test::normal(n_q * ld_w, 7 + n_q);
              for (size_t g = 0; g < n_q; ++g) w[g * ld_w] = 0.0f;  // row 0 skipped by every query
              if (rows > 1) w[1] = 0.0f;                            // row 1 zero for one query only
              const size_t ld_o = dim + 1;
              std::vector<float> out_fast(n_q * ld_o, 0.5f), out_slow(n_q * ld_o, 0.5f);
              rows_weighted_sum_group(w.data(), n_q, ld_w, base, type, rows, dim, out_fast.data(), ld_o);
              rows_weighted_sum_group_scalar(w.data(), n_q, ld_w, base, type, rows, dim, out_slow.data(), ld_o);
              for (size_t g = 0; g < n_q; ++g) {
                std::vector<float> one(dim, 0.5f);
                rows_weighted_sum(w.data() + g * ld_w, base, type, rows, dim, one.data());
                for (size_t i = 0; i < dim; ++i) {
                  EXPECT_EQ(out_fast[g * ld_o + i], one[i]);
                  EXPECT_NEAR(out_fast[g * ld_o + i], out_slow[g * ld_o + i],
                              1e-5 * (1 + std::abs(out_slow[g * ld_o + i])) * std::sqrt(double(rows)));
                }
              }
            }
          }
        }
      }
    }
  });
}

// More than 4 queries go over the rows in tiles of about 32 KiB (each tile's passes together):
// every query's sum is still its one-query sum, bit for bit, with rows past several tiles, rows
// every query weighs 0 (stale bits: NaN) among them, every row format and target.
TEST(KVRows, WeightedSumsOfManyQueriesEqualTheOneQuerySumsAcrossRowTiles) {
  testing::for_each_target([] {
    for (KVType type : {KVType::f16, KVType::f32, KVType::q8_0, KVType::q4_0}) {
      for (size_t dim : {32u, 64u, 256u}) {
        const size_t rows = 1100, rb = kv_row_bytes(type, dim);
        std::vector<std::byte> values = stored_rows(type, rows, dim, dim + 11);
        for (size_t n_q : {5u, 8u, 13u}) {
          const size_t ld_w = rows + 3;
          std::vector<float> w = test::normal(n_q * ld_w, n_q + dim);
          for (size_t j = 97; j < rows; j += 211) {  // unseen by every query: their bits never count
            for (size_t g = 0; g < n_q; ++g) w[g * ld_w + j] = 0.0f;
            std::memset(values.data() + j * rb, 0xff, rb);
          }
          std::vector<float> all(n_q * dim, 0.25f);
          rows_weighted_sum_group(w.data(), n_q, ld_w, values.data(), type, rows, dim, all.data(), dim);
          for (size_t g = 0; g < n_q; ++g) {
            std::vector<float> one(dim, 0.25f);
            rows_weighted_sum_group(w.data() + g * ld_w, 1, ld_w, values.data(), type, rows, dim, one.data(), dim);
            for (size_t i = 0; i < dim; ++i) {
              ASSERT_FALSE(std::isnan(all[g * dim + i])) << to_string(type);
              ASSERT_EQ(all[g * dim + i], one[i]) << to_string(type) << " dim " << dim << " query " << g;
            }
          }
        }
      }
    }
  });
}

// Key dots of more than 4 queries take a pass over the rows per four (Qwen2.5 has 6 queries a KV
// head): each query's dots are still its own call's bits, rows plain or turned back by their
// shifts, over 1,100 rows.
TEST(KVRows, KeyDotsOfManyQueriesEqualTheOneQueryDots) {
  testing::for_each_target([] {
    for (KVType type : {KVType::f16, KVType::f32, KVType::q8_0, KVType::q4_0}) {
      for (size_t dim : {32u, 64u, 128u}) {
        const size_t rows = 1100;
        const std::vector<std::byte> keys = stored_rows(type, rows, dim, dim + 13);
        constexpr size_t kShifts = 9;
        const std::vector<float> turns = test::rope_turns(kShifts, dim, true);
        std::vector<int32_t> shifts(rows);
        for (size_t j = 0; j < rows; ++j) shifts[j] = int32_t(j % kShifts);
        for (size_t n_q : {5u, 6u, 8u, 13u}) {
          const size_t ld_q = dim + 1, ld_out = rows + 3;
          const auto q = test::normal(n_q * ld_q, n_q + dim);
          std::vector<float> all(n_q * ld_out), turned(n_q * ld_out), one(rows), one_turned(rows);
          row_dots_group(q.data(), n_q, ld_q, keys.data(), type, rows, dim, all.data(), ld_out);
          const bool floats = type == KVType::f16 || type == KVType::f32;  // the fused turn's formats
          if (floats) {
            row_dots_rotated(q.data(), n_q, ld_q, keys.data(), type, shifts.data(), rows, dim, dim, true, turns.data(),
                             turned.data(), ld_out);
          }
          for (size_t g = 0; g < n_q; ++g) {
            row_dots_group(q.data() + g * ld_q, 1, ld_q, keys.data(), type, rows, dim, one.data(), rows);
            for (size_t j = 0; j < rows; ++j) {
              ASSERT_EQ(all[g * ld_out + j], one[j])
                  << to_string(type) << " dim " << dim << " query " << g << " row " << j;
            }
            if (!floats) continue;
            row_dots_rotated(q.data() + g * ld_q, 1, ld_q, keys.data(), type, shifts.data(), rows, dim, dim, true,
                             turns.data(), one_turned.data(), rows);
            for (size_t j = 0; j < rows; ++j) {
              ASSERT_EQ(turned[g * ld_out + j], one_turned[j]) << to_string(type) << " dim " << dim << " row " << j;
            }
          }
        }
      }
    }
  });
}

// A row's dot is the same bits whatever rows share its call and wherever it sits in the kernel's
// blocks of rows (the engine relies on it: a batch's queries read prefixes of the rows, KIVI's fp16
// rows are dotted in one call): every row format, every target, query groups of 1 to 9, calls that
// start at rows 0 to 5 and single-row calls.
TEST(KVRows, ARowsDotDoesNotDependOnItsNeighbours) {
  testing::for_each_target([] {
    for (KVType type : {KVType::f16, KVType::f32, KVType::q8_0, KVType::q4_0}) {
      for (size_t dim : {8u, 32u, 64u, 96u, 128u}) {
        const size_t rows = 37, rb = kv_row_bytes(type, dim);
        const std::vector<std::byte> keys = stored_rows(type, rows, dim, dim + 5);
        for (size_t n_q : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u, 9u}) {
          const auto q = test::normal(n_q * dim, n_q * 3 + dim);
          std::vector<float> all(n_q * rows);
          row_dots_group(q.data(), n_q, dim, keys.data(), type, rows, dim, all.data(), rows);
          for (size_t first = 1; first <= 5; ++first) {
            const size_t n = rows - first;
            std::vector<float> part(n_q * n);
            row_dots_group(q.data(), n_q, dim, keys.data() + first * rb, type, n, dim, part.data(), n);
            for (size_t g = 0; g < n_q; ++g) {
              for (size_t j = 0; j < n; ++j) ASSERT_EQ(part[g * n + j], all[g * rows + first + j]) << to_string(type);
            }
          }
          for (size_t j = 0; j < rows; j += 7) {
            std::vector<float> one(n_q);
            row_dots_group(q.data(), n_q, dim, keys.data() + j * rb, type, 1, dim, one.data(), 1);
            for (size_t g = 0; g < n_q; ++g) ASSERT_EQ(one[g], all[g * rows + j]) << to_string(type) << " row " << j;
          }
        }
      }
    }
  });
}

TEST(KVRows, QueryBlockDotsMatchesTheScalarTwin) {
  for (size_t dim : {1u, 8u, 13u, 64u, 128u}) {
    for (size_t m : {1u, 3u, 4u, 5u, 8u, 9u, 12u, 13u, 17u, 64u}) {
      for (size_t n : {1u, 15u, 16u, 17u, 32u, 33u, 70u}) {
        const size_t ld = transposed_keys_stride(n);
        std::vector<float> kt(dim * ld, 0.0f);
        const auto src = test::normal(dim * n, n * 7 + dim);
        for (size_t d = 0; d < dim; ++d) {
          for (size_t j = 0; j < n; ++j) kt[d * ld + j] = src[d * n + j];
        }
        const auto q = test::normal(m * dim, m);
        std::vector<float> fast(m * ld, -1.0f), slow(m * ld, -1.0f);
        query_block_dots(q.data(), m, dim, kt.data(), ld, n, dim, fast.data(), ld);
        query_block_dots_scalar(q.data(), m, dim, kt.data(), ld, n, dim, slow.data(), ld);
        for (size_t i = 0; i < m; ++i) {
          for (size_t j = 0; j < n; ++j) {
            EXPECT_NEAR(fast[i * ld + j], slow[i * ld + j], 1e-4 * std::sqrt(double(dim)));
          }
        }
      }
    }
  }
}

// An odd number of 32-float tiles, the fewest that hold n: rows 128 bytes times an odd number apart
// (4,608 keys would put a tile's 64 rows into 2 of an L1's 64 sets; 4,640 spreads them).
TEST(KVRows, TransposedKeysStrideIsTheFirstOddMultipleOf32FromNUp) {
  EXPECT_EQ(transposed_keys_stride(4608), 4640u);
  EXPECT_EQ(transposed_keys_stride(4577), 4640u);
  EXPECT_EQ(transposed_keys_stride(4641), 4704u);
  EXPECT_EQ(transposed_keys_stride(1), 32u);
  for (size_t n = 1; n < 20000; ++n) {
    const size_t ld = transposed_keys_stride(n);
    ASSERT_GE(ld, n);
    ASSERT_EQ(ld % 64, 32u) << n;
    ASSERT_LT(ld - n, 64u) << n;
    if (n > 32) {
      ASSERT_LE(transposed_keys_stride(n - 32), ld) << n;
    }
  }
}

// Positions inside the cache: the SIMD kernel against its scalar twin (same rounding) and both
// against rope_apply_inverse row by row, for both RoPE styles, partial rotation and odd widths.
TEST(KVRows, RotateRowsBackMatchesTheScalarTwinAndTheInverseRope) {
  constexpr int kShifts = 40;
  for (RopeStyle style : {RopeStyle::normal, RopeStyle::neox}) {
    const bool neox = style == RopeStyle::neox;
    for (size_t dim : {6u, 8u, 16u, 64u, 128u}) {
      for (size_t n_rot : {dim, dim / 2 % 2 == 0 ? dim / 2 : dim}) {
        const std::vector<float> turns = test::rope_turns(size_t(kShifts), n_rot, neox);
        std::vector<float> cos_sin(n_rot);
        for (KVType type : {KVType::f16, KVType::f32}) {
          const size_t n_rows = 37;
          const auto x = test::normal(n_rows * dim, dim + n_rot);
          const auto rows = stored(x, type, 0);
          std::vector<int32_t> shifts(n_rows);
          for (size_t j = 0; j < n_rows; ++j) shifts[j] = int32_t((j * 7) % kShifts);
          std::vector<float> simd(n_rows * dim), scalar(n_rows * dim), oracle(n_rows * dim);
          rotate_rows_back(rows.data(), type, shifts.data(), n_rows, dim, n_rot, neox, turns.data(), simd.data());
          rotate_rows_back_scalar(rows.data(), type, shifts.data(), n_rows, dim, n_rot, neox, turns.data(),
                                  scalar.data());
          load_rows(rows.data(), type, oracle.data(), n_rows * dim);
          for (size_t j = 0; j < n_rows; ++j) {
            rope_cache(shifts[j], int64_t(n_rot), 10000.0f, cos_sin.data());
            rope_apply_inverse(oracle.data() + j * dim, int64_t(n_rot), style, cos_sin.data());
          }
          for (size_t i = 0; i < simd.size(); ++i) {
            ASSERT_NEAR(simd[i], scalar[i], 1e-6f * (1.0f + std::fabs(scalar[i]))) << "dim " << dim << " i " << i;
            ASSERT_NEAR(simd[i], oracle[i], 1e-6f * (1.0f + std::fabs(oracle[i]))) << "dim " << dim << " i " << i;
          }
          // Shift 0 rows are the stored values exactly.
          EXPECT_EQ(simd[0], oracle[0]);
        }
      }
    }
  }
}

TEST(KVRows, MaskedSoftmaxNormalisesTheUnmaskedEntries) {
  for (size_t n : {1u, 2u, 7u, 16u, 17u, 100u}) {
    std::vector<float> x = test::normal(n, n, 5.0f);
    std::vector<uint8_t> mask(n);
    for (size_t i = 0; i < n; ++i) mask[i] = (i % 3) != 1;
    const std::vector<float> orig = x;
    ASSERT_TRUE(masked_softmax(x.data(), mask.data(), n));
    double sum = 0, ref_sum = 0, mx = -1e30;
    for (size_t i = 0; i < n; ++i) {
      if (mask[i]) mx = std::max(mx, double(orig[i]));
    }
    for (size_t i = 0; i < n; ++i) {
      if (mask[i]) ref_sum += std::exp(orig[i] - mx);
    }
    for (size_t i = 0; i < n; ++i) {
      sum += x[i];
      if (!mask[i]) EXPECT_EQ(x[i], 0.0f);
      else EXPECT_NEAR(x[i], std::exp(orig[i] - mx) / ref_sum, 1e-6);
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
  std::vector<float> x = {1.0f, 2.0f};
  const std::vector<uint8_t> none = {0, 0};
  EXPECT_FALSE(masked_softmax(x.data(), none.data(), 2));
  EXPECT_EQ(x, (std::vector<float>{0.0f, 0.0f}));
}

}  // namespace
}  // namespace squeezekv
