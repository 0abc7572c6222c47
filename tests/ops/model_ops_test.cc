// model_ops kernels (SIMD, every compiled target) against their scalar twins and hand values,
// for every length up to two AVX-512 vectors plus a few, at several misalignments.
#include "squeezekv/ops/model_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "ops/hwy_targets.h"
#include "squeezekv/base/errors.h"

namespace squeezekv {
namespace {

constexpr int64_t max_length = 2 * 16 + 5;  // two 16-float vectors and a few more
constexpr int64_t max_misalign = 3;

// Random values at an offset of misalign floats into their storage.
struct Buffer {
  std::vector<float> storage;
  float* data;
  Buffer(int64_t n, int64_t misalign, uint32_t seed, float scale = 1.0f) : storage(static_cast<size_t>(n + misalign)) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, scale);
    for (float& v : storage) v = normal(rng);
    data = storage.data() + misalign;
  }
};

// Calls body(n, misalign, seed) for every length and misalignment on every target.
template <class Body>
void for_each_case(Body body) {
  testing::for_each_target([&] {
    uint32_t seed = 1;
    for (int64_t n = 1; n <= max_length; ++n) {
      for (int64_t misalign = 0; misalign <= max_misalign; ++misalign) {
        SCOPED_TRACE("n " + std::to_string(n) + " misalign " + std::to_string(misalign));
        body(n, misalign, ++seed);
      }
    }
  });
}

void expect_near_relative(const float* actual, const float* expected, int64_t n, double relative, double absolute) {
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(actual[i], expected[i], relative * std::fabs(expected[i]) + absolute) << "element " << i;
  }
}

void expect_identical(const float* actual, const float* expected, int64_t n) {
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(actual[i], expected[i]) << "element " << i;
}

TEST(ops_model_ops, RmsNormMatchesTwin) {
  for_each_case([](int64_t n, int64_t misalign, uint32_t seed) {
    const Buffer x(n, misalign, seed), w(n, (misalign + 1) % 4, seed + 1000);
    Buffer out(n, (misalign + 2) % 4, 0), expected(n, 0, 0);
    rms_norm(x.data, w.data, n, 1e-5f, out.data);
    rms_norm_scalar(x.data, w.data, n, 1e-5f, expected.data);
    expect_near_relative(out.data, expected.data, n, 1e-6, 0.0);
    // In place.
    Buffer y(n, misalign, seed);
    rms_norm(y.data, w.data, n, 1e-5f, y.data);
    expect_identical(y.data, out.data, n);
  });
}

TEST(ops_model_ops, RmsNormHandValues) {
  const float x[] = {3.0f, 4.0f}, w[] = {1.0f, 2.0f};
  float out[2];
  rms_norm(x, w, 2, 0.0f, out);  // mean square 12.5
  EXPECT_FLOAT_EQ(out[0], 3.0f / std::sqrt(12.5f));
  EXPECT_FLOAT_EQ(out[1], 8.0f / std::sqrt(12.5f));
  const float zeros[] = {0.0f, 0.0f};
  rms_norm(zeros, w, 2, 1e-5f, out);
  EXPECT_EQ(out[0], 0.0f);
}

TEST(ops_model_ops, SoftmaxMatchesTwinAndSumsToOne) {
  for_each_case([](int64_t n, int64_t misalign, uint32_t seed) {
    Buffer x(n, misalign, seed, 5.0f), expected(n, 0, 0);
    std::copy(x.data, x.data + n, expected.data);
    softmax_inplace(x.data, n);
    softmax_inplace_scalar(expected.data, n);
    expect_near_relative(x.data, expected.data, n, 1e-6, 1e-12);
    const double sum = std::accumulate(x.data, x.data + n, 0.0);
    ASSERT_NEAR(sum, 1.0, 1e-6);
  });
}

TEST(ops_model_ops, SoftmaxHandValues) {
  float x[] = {0.0f, std::log(3.0f)};
  softmax_inplace(x, 2);
  EXPECT_FLOAT_EQ(x[0], 0.25f);
  EXPECT_FLOAT_EQ(x[1], 0.75f);
  // Large logits and -inf (masked) entries.
  float y[] = {1000.0f, 1000.0f, -INFINITY};
  softmax_inplace(y, 3);
  EXPECT_FLOAT_EQ(y[0], 0.5f);
  EXPECT_EQ(y[2], 0.0f);
  float one[] = {-3.0f};
  softmax_inplace(one, 1);
  EXPECT_EQ(one[0], 1.0f);
}

TEST(ops_model_ops, SwigluMatchesTwin) {
  for_each_case([](int64_t n, int64_t misalign, uint32_t seed) {
    const Buffer gate(n, misalign, seed, 4.0f), up(n, (misalign + 3) % 4, seed + 7);
    Buffer out(n, misalign, 0), expected(n, 0, 0);
    swiglu(gate.data, up.data, n, out.data);
    swiglu_scalar(gate.data, up.data, n, expected.data);
    expect_near_relative(out.data, expected.data, n, 2e-6, 1e-30);
  });
}

TEST(ops_model_ops, SwigluHandValues) {
  const float gate[] = {0.0f, 1.0f, -200.0f, 200.0f}, up[] = {5.0f, 2.0f, 1.0f, 0.5f};
  float out[4];
  swiglu(gate, up, 4, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_FLOAT_EQ(out[1], 2.0f / (1.0f + std::exp(-1.0f)));
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_FLOAT_EQ(out[3], 100.0f);
}

TEST(ops_model_ops, ElementwiseOpsAreBitIdentical) {
  for_each_case([](int64_t n, int64_t misalign, uint32_t seed) {
    const Buffer src(n, (misalign + 1) % 4, seed + 3);
    const Buffer start(n, misalign, seed);
    Buffer a(n, misalign, seed), b(n, 0, seed + 11);
    const auto reset = [&] {
      std::copy(start.data, start.data + n, a.data);
      std::copy(start.data, start.data + n, b.data);
    };
    reset();
    add_inplace(a.data, src.data, n);
    add_inplace_scalar(b.data, src.data, n);
    expect_identical(a.data, b.data, n);
    reset();
    mul_inplace(a.data, src.data, n);
    mul_inplace_scalar(b.data, src.data, n);
    expect_identical(a.data, b.data, n);
    reset();
    scale_inplace(a.data, n, 0.37f);
    scale_inplace_scalar(b.data, n, 0.37f);
    expect_identical(a.data, b.data, n);
    reset();
    axpy(a.data, src.data, n, -1.7f);
    axpy_scalar(b.data, src.data, n, -1.7f);
    expect_identical(a.data, b.data, n);
  });
}

TEST(ops_model_ops, DotMatchesTwin) {
  for_each_case([](int64_t n, int64_t misalign, uint32_t seed) {
    const Buffer a(n, misalign, seed), b(n, (misalign + 2) % 4, seed + 5);
    double magnitude = 0.0, exact = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      magnitude += std::fabs(static_cast<double>(a.data[i]) * b.data[i]);
      exact += static_cast<double>(a.data[i]) * b.data[i];
    }
    ASSERT_NEAR(dot(a.data, b.data, n), exact, 1e-6 * magnitude);
    ASSERT_NEAR(dot_scalar(a.data, b.data, n), exact, 1e-6 * magnitude);
  });
}

TEST(ops_model_ops, ArgmaxAndLogsumexp) {
  const float x[] = {1.0f, 5.0f, -2.0f, 5.0f};
  EXPECT_EQ(argmax(x, 4), 1);  // first of the ties
  EXPECT_EQ(argmax(x, 1), 0);
  EXPECT_NEAR(logsumexp(x, 4), std::log(std::exp(1.0) + 2 * std::exp(5.0) + std::exp(-2.0)), 1e-12);
  const float big[] = {1000.0f, 1000.0f};
  EXPECT_NEAR(logsumexp(big, 2), 1000.0 + std::log(2.0), 1e-9);
}

// ------------------------------ RoPE

// Double-precision RoPE, the textbook formula.
void rope_double(float* x, int64_t pos, int64_t n_rot, double base, RopeStyle style) {
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double theta =
        static_cast<double>(pos) * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
    const int64_t a = style == RopeStyle::normal ? 2 * i : i;
    const int64_t b = style == RopeStyle::normal ? 2 * i + 1 : i + n_rot / 2;
    const double x0 = x[a], x1 = x[b];
    x[a] = static_cast<float>(x0 * std::cos(theta) - x1 * std::sin(theta));
    x[b] = static_cast<float>(x0 * std::sin(theta) + x1 * std::cos(theta));
  }
}

// Checks x (rotated by rope) against the double formula applied to original, each pair within
// tolerance * |pair| (rotations keep the pair's norm, so the error scales with it).
void expect_rotation_near(const float* x, const float* original, int64_t pos, int64_t n_rot, double base,
                          RopeStyle style, double tolerance) {
  std::vector<float> exact(original, original + n_rot);
  rope_double(exact.data(), pos, n_rot, base, style);
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const int64_t a = style == RopeStyle::normal ? 2 * i : i;
    const int64_t b = style == RopeStyle::normal ? 2 * i + 1 : i + n_rot / 2;
    const double norm = std::hypot(static_cast<double>(original[a]), static_cast<double>(original[b]));
    ASSERT_NEAR(x[a], exact[static_cast<size_t>(a)], tolerance * norm) << "pair " << i;
    ASSERT_NEAR(x[b], exact[static_cast<size_t>(b)], tolerance * norm) << "pair " << i;
  }
}

// llama.cpp's loop written out independently (ggml_rope_cache_init + the rotate step).
void rope_llama_cpp(float* x, int64_t pos, int64_t n_dims, float freq_base, bool neox) {
  const float theta_scale = powf(freq_base, -2.0f / static_cast<float>(n_dims));
  std::vector<float> cache(static_cast<size_t>(n_dims));
  float theta = static_cast<float>(pos);
  for (int64_t i0 = 0; i0 < n_dims; i0 += 2) {
    cache[static_cast<size_t>(i0)] = cosf(theta);
    cache[static_cast<size_t>(i0 + 1)] = sinf(theta);
    theta *= theta_scale;
  }
  for (int64_t i0 = 0; i0 < n_dims; i0 += 2) {
    const float c = cache[static_cast<size_t>(i0)], s = cache[static_cast<size_t>(i0 + 1)];
    const int64_t a = neox ? i0 / 2 : i0, b = neox ? i0 / 2 + n_dims / 2 : i0 + 1;
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
}

TEST(ops_model_ops, RopeAtPositionZeroIsIdentity) {
  for (const RopeStyle style : {RopeStyle::normal, RopeStyle::neox}) {
    Buffer x(128, 1, 3), original(128, 0, 0);
    std::copy(x.data, x.data + 128, original.data);
    rope(x.data, 0, 128, 10000.0f, style);
    expect_identical(x.data, original.data, 128);
  }
}

TEST(ops_model_ops, RopeMatchesDoubleFormula) {
  for (const RopeStyle style : {RopeStyle::normal, RopeStyle::neox}) {
    for (const int64_t n_rot : {2, 8, 64, 128}) {
      for (int64_t pos = 0; pos <= 8; ++pos) {
        SCOPED_TRACE("n_rot " + std::to_string(n_rot) + " pos " + std::to_string(pos));
        Buffer x(n_rot + 4, 2, static_cast<uint32_t>(pos + n_rot)), expected(n_rot + 4, 0, 0);
        std::copy(x.data, x.data + n_rot + 4, expected.data);
        rope(x.data, pos, n_rot, 10000.0f, style);
        // Float angles (llama.cpp's) and cosf/sinf: within 1e-6 of the pair's norm up to pos 8;
        // beyond, the angle's own rounding grows with pos (see RopeFollowsLlamaCppExactly).
        expect_rotation_near(x.data, expected.data, pos, n_rot, 10000.0, style, 1e-6);
        for (int64_t i = n_rot; i < n_rot + 4; ++i) ASSERT_EQ(x.data[i], expected.data[i]) << "beyond n_rot";
      }
    }
  }
}

TEST(ops_model_ops, RopeFollowsLlamaCppExactly) {
  for (const RopeStyle style : {RopeStyle::normal, RopeStyle::neox}) {
    for (const int64_t n_rot : {8, 64, 128}) {
      for (const int64_t pos : {1, 7, 100, 511, 4095}) {
        for (const float base : {10000.0f, 500000.0f}) {
          Buffer x(n_rot, 0, static_cast<uint32_t>(pos)), expected(n_rot, 0, static_cast<uint32_t>(pos));
          rope(x.data, pos, n_rot, base, style);
          rope_llama_cpp(expected.data, pos, n_rot, base, style == RopeStyle::neox);
          expect_identical(x.data, expected.data, n_rot);
          // Far from the origin the float angle drifts from the exact one (llama.cpp's own error,
          // measured at about 1.2e-7 * pos of the pair's norm).
          const Buffer original(n_rot, 0, static_cast<uint32_t>(pos));
          expect_rotation_near(x.data, original.data, pos, n_rot, base, style, 2e-7 * static_cast<double>(pos) + 1e-6);
        }
      }
    }
  }
}

TEST(ops_model_ops, RopeCacheAndApplyMatchRope) {
  std::vector<float> cos_sin(64);
  for (const RopeStyle style : {RopeStyle::normal, RopeStyle::neox}) {
    Buffer a(64, 0, 9), b(64, 0, 9);
    rope(a.data, 37, 64, 10000.0f, style);
    rope_cache(37, 64, 10000.0f, cos_sin.data());
    rope_apply(b.data, 64, style, cos_sin.data());
    expect_identical(a.data, b.data, 64);
  }
  float x[4] = {};
  EXPECT_THROW(rope(x, 1, 3, 10000.0f, RopeStyle::normal), InvalidArgument);
  EXPECT_THROW(rope(x, 1, 0, 10000.0f, RopeStyle::normal), InvalidArgument);
}

}  // namespace
}  // namespace squeezekv
