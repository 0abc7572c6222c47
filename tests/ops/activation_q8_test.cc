// The 8-bit activations that quantised products read are ggml's: blocks of 32 as q8_0/q8_1 (f16
// scale, rounding half to even as ggml's AVX2 quantiser does) and blocks of 256 as q8_K (f32
// scale of sign opposite to the largest element). Expected values worked out by hand from
// ggml's quantize_row_q8_1 and quantize_row_q8_K_ref; f16 roundings noted beside them.
#include "ops/activation_q8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "hwy_targets.h"
#include "squeezekv/ops/thread_pool.h"

namespace squeezekv::detail {
namespace {

TEST(ActivationQ8, BlocksOf32HaveAnF16ScaleAndAnF16ScaledSum) {
  std::vector<float> x(64, 0.0f);
  x[0] = 3.0f;
  x[1] = -1.0f;
  x[2] = 0.5f;
  x[3] = 1.0f / 3.0f;  // the second block stays zero
  QuantizedActivations a;
  a.assign(x.data(), 1, 64);
  // x * (127 / 3): 127, -42.33, 21.17, 14.11.
  EXPECT_EQ(a.q[0], 127);
  EXPECT_EQ(a.q[1], -42);
  EXPECT_EQ(a.q[2], 21);
  EXPECT_EQ(a.q[3], 14);
  EXPECT_EQ(a.q8[1], -42);
  // 3 / 127 = 0.0236220... rounds to the f16 1548 * 2^-16; 120 * 3 / 127 = 2.8346... to 2.833984375.
  EXPECT_EQ(a.scale[0], 0.02362060546875f);
  EXPECT_EQ(a.scaled_sum[0], 2.833984375f);
  EXPECT_EQ(a.q8_0_offset[0], -128 * 120);
  EXPECT_EQ(a.q6_k_offset[0], -32 * 120);
  EXPECT_EQ(a.q6_k_offset[1], 0);
  EXPECT_EQ(a.scale[1], 0.0f);
  EXPECT_EQ(a.scaled_sum[1], 0.0f);
  for (int i = 32; i < 64; ++i) EXPECT_EQ(a.q[size_t(i)], 0);
}

TEST(ActivationQ8, HalvesRoundToEven) {
  // max |x| = 127 makes x * 127 / max |x| = x exactly.
  std::vector<float> x = {127.0f, 2.5f, 3.5f, -2.5f, -3.5f, 0.5f, -0.5f, 1.5f};
  x.resize(32, 0.0f);
  QuantizedActivations a;
  a.assign(x.data(), 1, 32);
  const int16_t expected[] = {127, 2, 4, -2, -4, 0, 0, 2};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(a.q[size_t(i)], expected[i]) << "x = " << x[size_t(i)];
  EXPECT_EQ(a.scale[0], 1.0f);
}

TEST(ActivationQ8, SuperBlocksShareOneF32ScaleOfOppositeSign) {
  std::vector<float> x(256, 0.0f);
  x[40] = 254.0f;   // the largest magnitude: iscale = -127 / 254 = -0.5, scale = -2
  x[0] = 3.0f;      // -1.5 -> -2
  x[1] = 5.0f;      // -2.5 -> -2
  x[2] = -7.0f;     // 3.5 -> 4
  x[33] = -253.0f;  // 126.5 -> 126
  QuantizedActivations a;
  a.assign(x.data(), 1, 256, /*super_blocks=*/true);
  EXPECT_EQ(a.q[0], -2);
  EXPECT_EQ(a.q[1], -2);
  EXPECT_EQ(a.q[2], 4);
  EXPECT_EQ(a.q[33], 126);
  EXPECT_EQ(a.q[40], -127);
  for (int b = 0; b < 8; ++b) EXPECT_EQ(a.scale[size_t(b)], -2.0f) << "block " << b;
  EXPECT_EQ(a.scaled_sum[0], 0.0f);  // -2 - 2 + 4 = 0
  EXPECT_EQ(a.scaled_sum[1], -2.0f * (126 - 127));
  EXPECT_EQ(a.q6_k_offset[2], -32 * (126 - 127));  // block 1, its first 16 values (33 and 40)
  EXPECT_EQ(a.q6_k_offset[3], 0);
  EXPECT_EQ(a.q8_0_offset[1], -128 * -1);
}

TEST(ActivationQ8, EveryValueIsWithinHalfAStepOnRandomInput) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const bool super : {false, true}) {
    const int64_t n_tok = 3, n_cols = 512;
    std::vector<float> x(size_t(n_tok * n_cols));
    for (float& v : x) v = normal(rng) * (rng() % 50 == 0 ? 100.0f : 1.0f);
    QuantizedActivations a;
    a.assign(x.data(), n_tok, n_cols, super);
    for (size_t i = 0; i < x.size(); ++i) {
      const float s = a.scale[i / 32];
      ASSERT_LE(std::abs(int(a.q[i])), 127);
      ASSERT_EQ(a.q8[i], a.q[i]);
      // The f16 scale may differ from max |x| / 127 by 2^-11 relative: 127 steps then miss max |x|
      // by up to 127 * 2^-11 steps.
      const float slack = super ? 0.5f : 0.5f + 127.0f / 2048.0f;
      ASSERT_LE(std::fabs(s * a.q[i] - x[i]), slack * std::fabs(s) * 1.0001f) << "element " << i;
    }
  }
}

TEST(ActivationQ8, NaNStaysWithinTheCodeRange) {
  std::vector<float> x(256, 1.0f);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  for (const bool super : {false, true}) {
    QuantizedActivations a;
    a.assign(x.data(), 1, 256, super);
    for (const int16_t q : a.q) ASSERT_LE(std::abs(int(q)), 127);
  }
}

// Values x below 3 whose float product x * (127 / 3) is exactly a half, k + 0.5, while the exact
// product is not: rounding the float product gives k + 0.5's even neighbour, a fused
// multiply-add (one rounding) the other side's. ggml multiplies, then rounds.
std::vector<float> near_halves(size_t count) {
  const double inv = double(127.0f / 3.0f);
  std::vector<float> out;
  for (int k = 0; k < 126 && out.size() < count; ++k) {
    const auto x0 = float((k + 0.5) / inv);
    float x = std::nextafter(std::nextafter(x0, 0.0f), 0.0f);
    for (int step = 0; step < 5; ++step, x = std::nextafter(x, 4.0f)) {
      const double exact = double(x) * inv;  // exact: two 24-bit significands
      if (float(exact) == float(k + 0.5) && exact != k + 0.5 && x < 3.0f) {
        out.push_back(x);
        break;
      }
    }
  }
  return out;
}

TEST(ActivationQ8, ProductsAreRoundedBeforeTheirHalvesAre) {
  const std::vector<float> halves = near_halves(31);
  ASSERT_GE(halves.size(), 16u);
  std::vector<float> x(256, 0.0f);
  for (size_t b = 0; b < 8; ++b) {
    x[b * 32] = 3.0f;  // every block's largest: 127 / 3 in both modes (the super-block's negated)
    for (size_t i = 0; i < halves.size(); ++i) x[b * 32 + 1 + i] = b % 2 == 0 ? halves[i] : -halves[i];
  }
  for (const bool super : {false, true}) {
    QuantizedActivations a;
    a.assign(x.data(), 1, 256, super);
    for (size_t i = 0; i < x.size(); ++i) {
      const float product = x[i] * (super ? -127.0f / 3.0f : 127.0f / 3.0f);  // rounded to float
      ASSERT_EQ(a.q[i], int16_t(std::nearbyint(product)))                     // halves to even
          << (super ? "super-blocks" : "blocks of 32") << ", x = " << x[i];
    }
  }
}

void ExpectSameCodes(const QuantizedActivations& a, const QuantizedActivations& expected) {
  ASSERT_EQ(a.q, expected.q);
  ASSERT_EQ(a.q8, expected.q8);
  ASSERT_EQ(a.q8_0_offset, expected.q8_0_offset);
  ASSERT_EQ(a.q6_k_offset, expected.q6_k_offset);
  ASSERT_EQ(a.scale.size(), expected.scale.size());
  for (size_t b = 0; b < a.scale.size(); ++b) {
    ASSERT_EQ(std::bit_cast<uint32_t>(a.scale[b]), std::bit_cast<uint32_t>(expected.scale[b])) << "block " << b;
    ASSERT_EQ(std::bit_cast<uint32_t>(a.scaled_sum[b]), std::bit_cast<uint32_t>(expected.scaled_sum[b]))
        << "block " << b;
  }
}

// n normal values, one in 40 of them `outlier` times larger.
std::vector<float> random_activations(size_t n, uint32_t seed, float outlier) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng) * (rng() % 40 == 0 ? outlier : 1.0f);
  return x;
}

// Every SIMD target's codes, scales and offsets equal the scalar quantiser's, bit for bit, on
// random input with the cases where orders or roundings could part: halves to round (x * inv
// an odd multiple of 0.5), NaN and infinities, blocks of zeros, and a largest magnitude that
// occurs twice with both signs.
TEST(ActivationQ8, EveryTargetEqualsTheScalarQuantiser) {
  const int64_t n_tok = 5, n_cols = 1024;
  std::vector<float> x = random_activations(size_t(n_tok * n_cols), 23, 1000.0f);
  for (size_t i = 0; i < 32; ++i) x[64 + i] = float(int(i) - 16) + 0.5f;  // max 15.5: x * 127 / 15.5
  x[96 + 5] = 127.0f;                                                     // block 3: x itself, every half a tie
  for (size_t i = 0; i < 32; ++i) x[96 + 6 + (i % 26)] = float(i % 7) - 3.5f;
  std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // a whole super-block of zeros
  x[600] = std::numeric_limits<float>::quiet_NaN();
  x[700] = std::numeric_limits<float>::infinity();
  x[800] = -std::numeric_limits<float>::infinity();
  for (size_t i = 1024; i < 1280; ++i) x[i] = std::clamp(x[i], -5.0f, 5.0f);
  x[1030] = 9.0f;  // the largest magnitude twice, the negative first
  x[1025] = -9.0f;
  x[2100] = -std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> halves = near_halves(31);  // a super-block of them (see above)
  for (size_t b = 0; b < 8; ++b) {
    x[3072 + b * 32] = 3.0f;
    for (size_t i = 0; i < halves.size(); ++i) x[3072 + b * 32 + 1 + i] = halves[i];
  }
  for (const bool super : {false, true}) {
    SCOPED_TRACE(super ? "super-blocks" : "blocks of 32");
    QuantizedActivations expected;
    expected.assign_scalar(x.data(), n_tok, n_cols, super);
    squeezekv::testing::for_each_target([&] {
      QuantizedActivations a;
      a.assign(x.data(), n_tok, n_cols, super);
      ExpectSameCodes(a, expected);
    });
  }
}

// A pool splits the tokens (unevenly: 37 over 3 workers) and writes the same codes.
TEST(ActivationQ8, APoolWritesTheSameCodesAsOneThread) {
  const int64_t n_tok = 37, n_cols = 512;
  const std::vector<float> x = random_activations(size_t(n_tok * n_cols), 5, 30.0f);
  ThreadPool pool(3);
  for (const bool super : {false, true}) {
    SCOPED_TRACE(super ? "super-blocks" : "blocks of 32");
    QuantizedActivations expected, a;
    expected.assign_scalar(x.data(), n_tok, n_cols, super);
    a.assign(x.data(), n_tok, n_cols, super, &pool);
    ExpectSameCodes(a, expected);
  }
}

}  // namespace
}  // namespace squeezekv::detail
