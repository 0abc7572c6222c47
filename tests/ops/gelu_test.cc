// GeGLU (ops/gelu.h): the SIMD kernel against its scalar twin on every Highway target, and exact
// values of the tanh-approximated GELU.
#include "squeezekv/ops/gelu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "hwy_targets.h"

namespace squeezekv {
namespace {

// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) in double: the reference.
double gelu_double(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

TEST(ops_gelu, SimdEqualsScalarTwinOnEveryTarget) {
  testing::for_each_target([] {
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 4.0f);
    for (int64_t n : {1, 3, 7, 8, 15, 16, 17, 33, 64, 257, 2048}) {
      const auto len = static_cast<size_t>(n);
      std::vector<float> gate(len + 1), up(len), out(len + 1), expected(len);
      for (float& g : gate) g = dist(rng);
      for (float& u : up) u = dist(rng);
      gate[0] = n % 2 ? 30.0f : -30.0f;  // the tanh's saturated ends
      // Misaligned by one float, tails of every length.
      geglu(gate.data() + 1, up.data(), n, out.data() + 1);
      geglu_scalar(gate.data() + 1, up.data(), n, expected.data());
      for (int64_t i = 0; i < n; ++i) {
        const float tolerance = 4e-6f * std::fabs(expected[size_t(i)]) + 4e-6f * std::fabs(up[size_t(i)]);
        EXPECT_NEAR(out[size_t(i) + 1], expected[size_t(i)], tolerance) << "n " << n << " i " << i;
      }
    }
  });
}

TEST(ops_gelu, ValuesOfTheTanhApproximation) {
  const std::vector<float> x = {0.0f, 1.0f, -1.0f, 0.5f, 3.0f, -3.0f, 10.0f, -10.0f, 100.0f, -100.0f};
  const std::vector<float> up(x.size(), 2.0f);
  std::vector<float> simd(x.size()), scalar(x.size());
  geglu(x.data(), up.data(), int64_t(x.size()), simd.data());
  geglu_scalar(x.data(), up.data(), int64_t(x.size()), scalar.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = 2.0 * gelu_double(double(x[i]));
    EXPECT_NEAR(scalar[i], want, 2e-6 * std::fabs(want) + 1e-7) << x[i];
    EXPECT_NEAR(simd[i], want, 4e-6 * std::fabs(want) + 1e-7) << x[i];
  }
  EXPECT_EQ(scalar[0], 0.0f);
  EXPECT_EQ(simd[8], 200.0f);                  // gelu(x) = x far right
  EXPECT_EQ(simd[9], -0.0f);                   // and 0 far left
  EXPECT_NEAR(scalar[1], 2 * 0.841192, 1e-5);  // gelu(1) = 0.841192 (tanh form)
}

TEST(ops_gelu, InPlaceOverTheGate) {
  std::vector<float> gate = {0.25f, -0.5f, 2.0f}, up = {1.0f, 3.0f, -1.0f}, expected(3);
  geglu_scalar(gate.data(), up.data(), 3, expected.data());
  geglu(gate.data(), up.data(), 3, gate.data());
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(gate[i], expected[i], 1e-6f);
}

}  // namespace
}  // namespace squeezekv
