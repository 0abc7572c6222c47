// The quantized K/V row formats (q8_0, q4_0): llama.cpp's bytes on hand-computed blocks, exact
// decoding of hand-built blocks, the error bound of a round trip, and the in-register SIMD
// kernels (dots, weighted sums, the fused turn-back) against their scalar twins and against
// dequantize-then-attend, on every compiled SIMD target.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <utility>
#include <vector>

#include "hwy_targets.h"
#include "ops/kv_format_kernels.h"
#include "ops/quant_formats.h"
#include "rope_turns.h"
#include "squeezekv/base/fp16.h"
#include "squeezekv/ops/kv_rows.h"
#include "squeezekv/ops/model_ops.h"
#include "test_util.h"

namespace squeezekv {
namespace {

constexpr KVType kQuant[] = {KVType::q8_0, KVType::q4_0};

std::vector<uint8_t> quantized(const std::vector<float>& x, KVType type, size_t dim) {
  std::vector<uint8_t> out(x.size() / dim * kv_row_bytes(type, dim));
  store_rows(x.data(), out.data(), type, x.size(), dim);
  return out;
}

std::vector<float> decoded(const std::vector<uint8_t>& rows, KVType type, size_t n, size_t dim) {
  std::vector<float> out(n);
  load_rows(rows.data(), type, out.data(), n, dim);
  return out;
}

TEST(KVQuant, SizesBlocksAndBitsPerValue) {
  EXPECT_EQ(kv_block_size(KVType::q8_0, 64), 32u);
  EXPECT_EQ(kv_block_size(KVType::q8_0, 8), 8u);  // stories260K: one block a row
  EXPECT_EQ(kv_row_bytes(KVType::q8_0, 64), 68u);
  EXPECT_EQ(kv_row_bytes(KVType::q4_0, 64), 36u);
  EXPECT_EQ(kv_row_bytes(KVType::q8_0, 8), 10u);
  EXPECT_EQ(kv_row_bytes(KVType::q4_0, 8), 6u);
  EXPECT_DOUBLE_EQ(kv_bits_per_value(KVType::q8_0, 128), 8.5);
  EXPECT_DOUBLE_EQ(kv_bits_per_value(KVType::q4_0, 128), 4.5);
  EXPECT_DOUBLE_EQ(kv_bits_per_value(KVType::f16, 128), 16.0);
  EXPECT_STREQ(kv_type_unfit(KVType::q8_0, 8), "");
  EXPECT_STREQ(kv_type_unfit(KVType::q8_0, 96), "");
  EXPECT_STRNE(kv_type_unfit(KVType::q8_0, 80), "");
  EXPECT_STRNE(kv_type_unfit(KVType::q4_0, 7), "");
  EXPECT_STREQ(kv_type_unfit(KVType::f16, 7), "");
}

// llama.cpp's q8_0 on a hand-computed block: amax 127 gives d = 1, q = round(x).
TEST(KVQuant, Q8_0BytesOfAHandComputedBlock) {
  std::vector<float> x(32);
  for (size_t j = 0; j < 32; ++j) x[j] = float(j) - 16.0f + 0.25f;  // -15.75 .. 15.25
  x[5] = -127.0f;
  const auto bytes = quantized(x, KVType::q8_0, 32);
  ASSERT_EQ(bytes.size(), 34u);
  EXPECT_EQ(bytes[0], 0x00);  // d = 1.0 = fp16 0x3C00, little-endian
  EXPECT_EQ(bytes[1], 0x3C);
  for (size_t j = 0; j < 32; ++j) {
    const int expected = j == 5 ? -127 : int(std::round(x[j]));
    EXPECT_EQ(int(int8_t(bytes[2 + j])), expected) << j;
  }
  // Rounding is half away from zero (roundf): 2.5 -> 3, -2.5 -> -3.
  std::vector<float> h(8, 0.0f);
  h[0] = 127.0f, h[1] = 2.5f, h[2] = -2.5f;
  const auto hb = quantized(h, KVType::q8_0, 8);
  EXPECT_EQ(int8_t(hb[2 + 1]), 3);
  EXPECT_EQ(int8_t(hb[2 + 2]), -3);
}

// llama.cpp's q4_0: d = (value of largest magnitude) / -8, byte j = element j (low nibble) and
// element j + 16 (high nibble), q = min(15, trunc(x / d + 8.5)).
TEST(KVQuant, Q4_0BytesOfAHandComputedBlock) {
  std::vector<float> x(32, 0.0f);
  x[0] = 8.0f;    // largest magnitude, positive: d = -1, q = trunc(-8 + 8.5) = 0
  x[1] = -3.0f;   // q = trunc(3 + 8.5) = 11
  x[16] = 2.0f;   // q = trunc(-2 + 8.5) = 6, high nibble of byte 0
  x[17] = -7.6f;  // q = trunc(7.6 + 8.5) = 16 -> clamped to 15, high nibble of byte 1
  x[31] = 0.4f;   // q = trunc(8.1) = 8
  const auto bytes = quantized(x, KVType::q4_0, 32);
  ASSERT_EQ(bytes.size(), 18u);
  EXPECT_EQ(bytes[0], 0x00);  // d = -1.0 = fp16 0xBC00
  EXPECT_EQ(bytes[1], 0xBC);
  EXPECT_EQ(bytes[2 + 0], 0x60);   // lo 0, hi 6
  EXPECT_EQ(bytes[2 + 1], 0xFB);   // lo 11, hi 15
  EXPECT_EQ(bytes[2 + 15], 0x88);  // element 15 = 0 -> 8; element 31 -> 8
  for (size_t j = 2; j < 15; ++j) EXPECT_EQ(bytes[2 + j], 0x88) << j;
  // Block of head_dim 8: byte j holds elements j and j + 4.
  std::vector<float> s = {-8.0f, 1.0f, 0.0f, 0.0f, 2.0f, 0.0f, 0.0f, 3.0f};
  const auto sb = quantized(s, KVType::q4_0, 8);
  ASSERT_EQ(sb.size(), 6u);
  // d = -8 / -8 = 1: q = x + 8 (trunc of x + 8.5).
  EXPECT_EQ(sb[2], 0xA0);  // 0 | 10 << 4
  EXPECT_EQ(sb[3], 0x89);  // 9 | 8 << 4
  EXPECT_EQ(sb[5], 0xB8);  // 8 | 11 << 4
}

// At B = 32 the bytes are the weight quantizers' (checked against ggml elsewhere).
TEST(KVQuant, BlocksOf32AreTheWeightFormatsBytes) {
  for (size_t dim : {32u, 64u, 128u}) {
    const auto x = test::normal(dim * 5, dim);
    std::vector<uint8_t> ref8(dim * 5 / 32 * 34), ref4(dim * 5 / 32 * 18);
    quant::quantize_q8_0(x.data(), ref8.data(), int64_t(x.size()));
    quant::quantize_q4_0(x.data(), ref4.data(), int64_t(x.size()));
    EXPECT_EQ(quantized(x, KVType::q8_0, dim), ref8);
    EXPECT_EQ(quantized(x, KVType::q4_0, dim), ref4);
  }
}

// A subnormal block: 1 / d overflows; codes are clamped, the fp16 scale is 0, so the row decodes
// to zeros (no undefined conversion, checked under UBSan).
TEST(KVQuant, SubnormalBlocksDecodeToZero) {
  for (KVType type : kQuant) {
    std::vector<float> x(8, 1e-45f);
    x[3] = -1e-45f;
    const auto back = decoded(quantized(x, type, 8), type, 8, 8);
    for (float v : back) EXPECT_EQ(std::fabs(v), 0.0f);
  }
}

TEST(KVQuant, HandBuiltBlocksDecodeExactly) {
  // q8_0, B = 8: d = 0.5 (0x3800), codes -128 .. 127 samples.
  const uint8_t q8[10] = {0x00, 0x38, 0x80, 0x7F, 0x00, 0x01, 0xFF, 0x10, 0xF0, 0x02};
  const float q8_want[8] = {-64.0f, 63.5f, 0.0f, 0.5f, -0.5f, 8.0f, -8.0f, 1.0f};
  float out[32];
  load_rows(q8, KVType::q8_0, out, 8, 8);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(out[i], q8_want[i]) << i;
  // q4_0, B = 8: d = -2 (0xC000); byte j: element j low, element j + 4 high; x = d * (q - 8).
  const uint8_t q4[6] = {0x00, 0xC0, 0xF0, 0x08, 0x7A, 0x81};
  const float q4_want[8] = {16.0f, -0.0f, -4.0f, 14.0f, -14.0f, 16.0f, 2.0f, -0.0f};
  load_rows(q4, KVType::q4_0, out, 8, 8);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(out[i], q4_want[i]) << i;
  // q4_0, B = 32: every code 0..15 in the low nibbles, 15 - code in the high ones; d = 0.25.
  uint8_t b32[18] = {0x00, 0x34};
  for (size_t j = 0; j < 16; ++j) b32[2 + j] = uint8_t(j | ((15 - j) << 4));
  load_rows(b32, KVType::q4_0, out, 32, 32);
  for (size_t j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.25f * float(int(j) - 8));
    EXPECT_EQ(out[j + 16], 0.25f * float(7 - int(j)));
  }
}

// The SIMD decoder (load_rows: the scratch turn-back and the prompt's key tiles read it) gives
// the scalar decoder's floats to the bit, on every target, for every block size.
TEST(KVQuant, VectorDecodeEqualsTheScalarDecoder) {
  testing::for_each_target([] {
    for (KVType type : kQuant) {
      for (size_t dim : {2u, 6u, 8u, 16u, 24u, 32u, 64u, 128u}) {
        if (kv_type_unfit(type, dim)[0] != '\0') continue;
        const size_t rows = 5;
        const auto bytes = quantized(test::normal(rows * dim, dim + 3, 2.0f), type, dim);
        const auto simd = decoded(bytes, type, rows * dim, dim);
        std::vector<float> scalar(rows * dim);
        for (size_t r = 0; r < rows; ++r) {
          kv_row_kernels(type).load_row_scalar(bytes.data() + r * kv_row_bytes(type, dim), dim,
                                               scalar.data() + r * dim);
        }
        for (size_t i = 0; i < rows * dim; ++i)
          ASSERT_EQ(simd[i], scalar[i]) << int(type) << " dim " << dim << " " << i;
      }
    }
  });
}

// |x - decode(encode(x))| <= half a step (d) plus what rounding the scale to fp16 moves a code;
// q4_0's one exception is llama.cpp's: codes run -8..7 around the signed maximum's -8, so a value
// more than 7.5 steps on the other side is clamped to code 15 and may be off by one step.
TEST(KVQuant, RoundTripErrorIsAtMostHalfAStep) {
  for (KVType type : kQuant) {
    const bool q8 = type == KVType::q8_0;
    for (size_t dim : {2u, 4u, 6u, 8u, 16u, 24u, 32u, 64u, 96u, 128u, 256u}) {
      if (kv_type_unfit(type, dim)[0] != '\0') continue;
      for (float scale : {1e-3f, 1.0f, 300.0f}) {
        const size_t rows = 9;
        auto x = test::normal(rows * dim, dim * 7 + size_t(scale), scale);
        if (dim >= 4) std::fill(x.begin(), x.begin() + std::ptrdiff_t(dim), 0.0f);  // an all-zero row
        const auto bytes = quantized(x, type, dim);
        const auto back = decoded(bytes, type, x.size(), dim);
        const size_t B = kv_block_size(type, dim);
        for (size_t b = 0; b < x.size() / B; ++b) {
          float amax = 0.0f, max = 0.0f;
          for (size_t j = 0; j < B; ++j) {
            if (amax < std::fabs(x[b * B + j])) {
              amax = std::fabs(x[b * B + j]);
              max = x[b * B + j];
            }
          }
          const float step = q8 ? amax / 127.0f : amax / 8.0f;
          const float stored_d = std::fabs(fp16_to_f32(f32_to_fp16(step)));
          const float codes = q8 ? 127.0f : 8.0f;
          const float bound = 0.5f * step + codes * std::fabs(stored_d - step) + 1e-30f;
          for (size_t j = 0; j < B; ++j) {
            const bool clamped = !q8 && max != 0.0f && x[b * B + j] * (-8.0f / max) > 7.5f;
            ASSERT_LE(std::fabs(x[b * B + j] - back[b * B + j]), (clamped ? bound + 0.5f * step : bound) * 1.0001f)
                << int(type) << " dim " << dim << " block " << b << " j " << j;
          }
        }
      }
    }
  }
}

TEST(KVQuant, KernelsMatchTheScalarTwinsOnEveryTarget) {
  testing::for_each_target([] {
    for (KVType type : kQuant) {
      for (size_t dim : {2u, 4u, 6u, 8u, 16u, 24u, 32u, 64u, 128u}) {
        if (kv_type_unfit(type, dim)[0] != '\0') continue;
        for (size_t rows : {1u, 3u, 4u, 9u, 33u}) {
          const auto k = test::normal(rows * dim, dim * 13 + rows);
          const auto bytes = quantized(k, type, dim);
          for (size_t n_q : {1u, 3u, 4u, 6u}) {
            const size_t ld_q = dim + 3, ld_out = rows + 5;
            const auto q = test::normal(n_q * ld_q, rows + n_q);
            std::vector<float> fast(n_q * ld_out), slow(n_q * ld_out), single(rows);
            row_dots_group(q.data(), n_q, ld_q, bytes.data(), type, rows, dim, fast.data(), ld_out);
            row_dots_group_scalar(q.data(), n_q, ld_q, bytes.data(), type, rows, dim, slow.data(), ld_out);
            row_dots(q.data(), bytes.data(), type, rows, dim, single.data());
            for (size_t g = 0; g < n_q; ++g) {
              for (size_t j = 0; j < rows; ++j) {
                const float s = slow[g * ld_out + j];
                ASSERT_NEAR(fast[g * ld_out + j], s, 2e-5 * (1 + std::abs(s)) * std::sqrt(double(dim)));
              }
            }
            // The group kernel's first query is computed exactly as the single one.
            for (size_t j = 0; j < rows; ++j) ASSERT_EQ(fast[j], single[j]);
            auto w = test::normal(n_q * ld_out, 5 * rows + n_q);
            w[0] = 0.0f;
            if (n_q == 1 && rows > 2) w[2] = 0.0f;
            std::vector<float> o_fast(n_q * dim, 0.5f), o_slow(n_q * dim, 0.5f), o_single(dim, 0.5f);
            rows_weighted_sum_group(w.data(), n_q, ld_out, bytes.data(), type, rows, dim, o_fast.data(), dim);
            rows_weighted_sum_group_scalar(w.data(), n_q, ld_out, bytes.data(), type, rows, dim, o_slow.data(), dim);
            rows_weighted_sum(w.data(), bytes.data(), type, rows, dim, o_single.data());
            for (size_t i = 0; i < n_q * dim; ++i) {
              ASSERT_NEAR(o_fast[i], o_slow[i], 2e-5 * (1 + std::abs(o_slow[i])) * std::sqrt(double(rows)));
            }
            for (size_t i = 0; i < dim; ++i)
              ASSERT_NEAR(o_single[i], o_slow[i], 2e-5 * (1 + std::abs(o_slow[i])) * std::sqrt(double(rows)));
          }
        }
      }
    }
  });
}

// Attention over quantized rows equals attention over their dequantized copy (the oracle is
// built here, in the test; the kernels never build one): logits to 1e-5 relative, probabilities
// to 1e-5 absolute, outputs to 1e-5 relative.
TEST(KVQuant, FusedAttentionEqualsDequantizeThenAttend) {
  testing::for_each_target([] {
    for (KVType type : kQuant) {
      for (size_t dim : {8u, 64u}) {
        const size_t rows = 50, n_q = 4, ld = 64;
        const auto k = test::normal(rows * dim, dim, 2.0f);
        const auto v = test::normal(rows * dim, dim + 1);
        const auto kq = quantized(k, type, dim), vq = quantized(v, type, dim);
        const auto kd = decoded(kq, type, k.size(), dim), vd = decoded(vq, type, v.size(), dim);
        const auto q = test::normal(n_q * dim, 3);
        std::vector<uint8_t> mask(rows, 1);
        mask[7] = 0;
        const float scale = 1.0f / std::sqrt(float(dim));
        std::vector<float> p_fused(n_q * ld), p_ref(n_q * ld);
        ASSERT_TRUE(
            query_probs(q.data(), n_q, dim, kq.data(), type, rows, dim, mask.data(), scale, p_fused.data(), ld));
        ASSERT_TRUE(
            query_probs(q.data(), n_q, dim, kd.data(), KVType::f32, rows, dim, mask.data(), scale, p_ref.data(), ld));
        for (size_t g = 0; g < n_q; ++g) {
          for (size_t j = 0; j < rows; ++j) ASSERT_NEAR(p_fused[g * ld + j], p_ref[g * ld + j], 1e-5);
          EXPECT_EQ(p_fused[g * ld + 7], 0.0f);
        }
        std::vector<float> o_fused(n_q * dim, 0.0f), o_ref(n_q * dim, 0.0f);
        rows_weighted_sum_group(p_ref.data(), n_q, ld, vq.data(), type, rows, dim, o_fused.data(), dim);
        rows_weighted_sum_group(p_ref.data(), n_q, ld, vd.data(), KVType::f32, rows, dim, o_ref.data(), dim);
        for (size_t i = 0; i < o_ref.size(); ++i) ASSERT_NEAR(o_fused[i], o_ref[i], 1e-5 * (1 + std::abs(o_ref[i])));
      }
    }
  });
}

// The fused turn-back (positions inside the cache) equals rotate_rows_back + query_probs and
// its scalar twin, for every format, both RoPE styles, and rotary parts shorter than the head
// (dim 64 with 32 rotated: float rows in registers; dim 8 with 4: the row-at-a-time path).
TEST(KVQuant, FusedTurnBackEqualsRotateThenAttend) {
  constexpr int kShifts = 20;
  testing::for_each_target([] {
    for (bool neox : {false, true}) {
      for (const auto& [dim, n_rot] :
           std::initializer_list<std::pair<size_t, size_t>>{{8, 8}, {8, 4}, {64, 64}, {64, 32}}) {
        SCOPED_TRACE(::testing::Message() << "neox " << neox << " dim " << dim << " n_rot " << n_rot);
        const std::vector<float> turns = test::rope_turns(size_t(kShifts), n_rot, neox);
        for (KVType type : {KVType::f32, KVType::f16, KVType::q8_0, KVType::q4_0}) {
          for (size_t rows : {23u, 150u}) {  // 150: many blocks of rows
            const size_t n_q = 3, ld = 160;
            const auto k = test::normal(rows * dim, dim + 5);
            std::vector<uint8_t> kq(rows * kv_row_bytes(type, dim));
            store_rows(k.data(), kq.data(), type, k.size(), dim);
            std::vector<int32_t> shifts(rows);
            for (size_t j = 0; j < rows; ++j) shifts[j] = int32_t((j * 3) % kShifts);
            std::vector<float> turned(rows * dim);
            rotate_rows_back(kq.data(), type, shifts.data(), rows, dim, n_rot, neox, turns.data(), turned.data());
            const auto q = test::normal(n_q * dim, 11);
            std::vector<uint8_t> mask(rows, 1);
            const float scale = 0.3f;
            std::vector<float> fused(n_q * ld), ref(n_q * ld), scalar(n_q * ld);
            query_probs_rotated(q.data(), n_q, dim, kq.data(), type, shifts.data(), rows, dim, n_rot, neox,
                                turns.data(), mask.data(), scale, fused.data(), ld);
            query_probs(q.data(), n_q, dim, turned.data(), KVType::f32, rows, dim, mask.data(), scale, ref.data(), ld);
            for (size_t i = 0; i < n_q * ld; ++i) {
              if (i % ld < rows) {
                ASSERT_EQ(fused[i], ref[i]) << i;  // same products, same order
              }
            }
            row_dots_rotated_scalar(q.data(), n_q, dim, kq.data(), type, shifts.data(), rows, dim, n_rot, neox,
                                    turns.data(), scalar.data(), ld);
            std::vector<float> dots(n_q * ld);
            row_dots_group(q.data(), n_q, dim, turned.data(), KVType::f32, rows, dim, dots.data(), ld);
            for (size_t g = 0; g < n_q; ++g) {
              for (size_t j = 0; j < rows; ++j) {
                ASSERT_NEAR(dots[g * ld + j], scalar[g * ld + j], 1e-5 * (1 + std::abs(scalar[g * ld + j])));
              }
            }
          }
        }
      }
    }
  });
}

}  // namespace
}  // namespace squeezekv
