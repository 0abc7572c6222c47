// The 8-bit activations that quantised products read are ggml's: blocks of 32 as q8_0/q8_1 (f16
// scale, rounding half to even as ggml's AVX2 quantiser does) and blocks of 256 as q8_K (f32
// scale of sign opposite to the largest element). Expected values worked out by hand from
// ggml's quantize_row_q8_1 and quantize_row_q8_K_ref; f16 roundings noted beside them.
#include "ops/activation_q8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

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

}  // namespace
}  // namespace squeezekv::detail
