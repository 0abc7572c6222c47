// Block formats: hand-built blocks decode to the values ggml's formats define; quantise ->
// dequantise round trips stay within stated bounds; F16/BF16 conversions are exact and round to
// nearest even.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "ops/weight_kernels.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/base/fp16.h"
#include "squeezekv/ops/repacked_weights.h"
#include "squeezekv/ops/tensor_type.h"

namespace squeezekv {
namespace {

constexpr uint16_t fp16_half = 0x3800;     // 0.5
constexpr uint16_t fp16_quarter = 0x3400;  // 0.25
constexpr uint16_t fp16_eighth = 0x3000;   // 0.125
constexpr uint16_t fp16_one = 0x3c00;      // 1.0

void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xff);  // GGUF is little-endian
  p[1] = static_cast<uint8_t>(v >> 8);
}

std::vector<float> dequantize(TensorType type, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(type, bytes.data(), out.data(), n);
  return out;
}

TEST(ops_quant, TypeTable) {
  EXPECT_EQ(tensor_type_name(0), "F32");
  EXPECT_EQ(tensor_type_name(1), "F16");
  EXPECT_EQ(tensor_type_name(2), "Q4_0");
  EXPECT_EQ(tensor_type_name(6), "Q5_0");
  EXPECT_EQ(tensor_type_name(8), "Q8_0");
  EXPECT_EQ(tensor_type_name(12), "Q4_K");
  EXPECT_EQ(tensor_type_name(13), "Q5_K");
  EXPECT_EQ(tensor_type_name(14), "Q6_K");
  EXPECT_EQ(tensor_type_name(17), "IQ2_XS");
  EXPECT_EQ(tensor_type_name(30), "BF16");
  EXPECT_EQ(tensor_type_name(39), "MXFP4");
  EXPECT_EQ(tensor_type_name(4), "type 4");
  EXPECT_EQ(tensor_type_name(1000), "type 1000");

  EXPECT_FALSE(block_layout(uint32_t{13}).has_value());
  EXPECT_FALSE(block_layout(uint32_t{16}).has_value());
  const struct {
    TensorType type;
    int64_t elems, bytes;
  } expected[] = {{TensorType::f32, 1, 4},    {TensorType::f16, 1, 2},      {TensorType::bf16, 1, 2},
                  {TensorType::q8_0, 32, 34}, {TensorType::q4_0, 32, 18},   {TensorType::q4_1, 32, 20},
                  {TensorType::q5_0, 32, 22}, {TensorType::q4_k, 256, 144}, {TensorType::q6_k, 256, 210}};
  for (const auto& e : expected) {
    const auto layout = block_layout(static_cast<uint32_t>(e.type));
    ASSERT_TRUE(layout.has_value());
    EXPECT_EQ(layout->block_elems, e.elems);
    EXPECT_EQ(layout->block_bytes, e.bytes);
    EXPECT_EQ(row_bytes(e.type, 512), static_cast<size_t>(512 / e.elems * e.bytes));
  }
}

// Types squeezekv cannot compute on still have ggml's layouts (the GGUF reader bounds-checks
// them); retired and unused ids have none.
TEST(ops_quant, GgmlLayoutsOfOtherTypes) {
  const struct {
    uint32_t id;
    int64_t elems, bytes;
  } expected[] = {{7, 32, 24}, {10, 256, 84}, {13, 256, 176}, {20, 32, 18}, {24, 1, 1},
                  {28, 1, 8},  {39, 32, 17},  {2, 32, 18},    {6, 32, 22},  {30, 1, 2}};
  for (const auto& e : expected) {
    const auto layout = ggml_block_layout(e.id);
    ASSERT_TRUE(layout.has_value()) << e.id;
    EXPECT_EQ(layout->block_elems, e.elems) << e.id;
    EXPECT_EQ(layout->block_bytes, e.bytes) << e.id;
  }
  for (const uint32_t id : {4u, 5u, 31u, 36u, 40u, 1000u}) EXPECT_FALSE(ggml_block_layout(id).has_value()) << id;
  EXPECT_FALSE(block_layout(uint32_t{7}).has_value());  // Q5_1: listed, not computed on
  EXPECT_THROW(block_layout(static_cast<TensorType>(7)), InvalidArgument);
}

// What the traits table derives for callers: the computable types in id order (the lists of
// matmul_test and `random-model --type`), look-up by name, the file type a model of each gets,
// and each type's kernels and repacked layout.
TEST(ops_quant, WeightTypesFromTheTable) {
  const std::vector<TensorType> expected = {TensorType::f32,  TensorType::f16,  TensorType::q4_0,
                                            TensorType::q4_1, TensorType::q5_0, TensorType::q8_0,
                                            TensorType::q4_k, TensorType::q6_k, TensorType::bf16};
  const std::span<const TensorType> types = weight_types();
  EXPECT_EQ(std::vector<TensorType>(types.begin(), types.end()), expected);

  EXPECT_EQ(tensor_type_by_name("Q4_K"), TensorType::q4_k);
  EXPECT_EQ(tensor_type_by_name("q4_k"), TensorType::q4_k);
  EXPECT_EQ(tensor_type_by_name("bf16"), TensorType::bf16);
  EXPECT_EQ(tensor_type_by_name("Q5_1"), std::nullopt);  // listed by ggml, not computed on
  EXPECT_EQ(tensor_type_by_name("q4_k_m"), std::nullopt);
  EXPECT_EQ(tensor_type_by_name(""), std::nullopt);

  // llama.cpp's llama_ftype values (Q4_K: Q4_K_M's).
  const std::pair<TensorType, uint32_t> file_types[] = {
      {TensorType::f32, 0},   {TensorType::f16, 1},   {TensorType::q4_0, 2},
      {TensorType::q4_1, 3},  {TensorType::q5_0, 8},  {TensorType::q8_0, 7},
      {TensorType::q4_k, 15}, {TensorType::q6_k, 18}, {TensorType::bf16, 32}};
  for (const auto& [type, file_type] : file_types) EXPECT_EQ(llama_file_type(type), file_type);
  EXPECT_THROW(llama_file_type(TensorType::q5_1), InvalidArgument);

  for (const TensorType type : types) {
    const detail::WeightKernels& kernels = detail::weight_kernels(type);
    EXPECT_NE(kernels.rows, nullptr) << tensor_type_name(static_cast<uint32_t>(type));
    // Every quantised type; the float types are read as they are.
    const bool repacks = type != TensorType::f32 && type != TensorType::f16 && type != TensorType::bf16;
    EXPECT_EQ(has_repacked_layout(type), repacks) << tensor_type_name(static_cast<uint32_t>(type));
    if (repacks) {
      EXPECT_NE(kernels.repacked->repack_groups, nullptr);
      EXPECT_NE(kernels.repacked->read_unit, nullptr);
    }
  }
  EXPECT_FALSE(has_repacked_layout(TensorType::q5_1));
  EXPECT_THROW(detail::weight_kernels(TensorType::q5_1), InvalidArgument);
}

TEST(ops_quant, RejectsPartialBlocks) {
  std::vector<float> out(64);
  std::vector<uint8_t> in(64 * 4);
  EXPECT_THROW(dequantize_row(TensorType::q8_0, in.data(), out.data(), 33), InvalidArgument);
  EXPECT_THROW(quantize_row(TensorType::q4_k, out.data(), in.data(), 32), InvalidArgument);
}

TEST(ops_quant, Q8_0HandBuilt) {
  std::vector<uint8_t> block(34);
  put_u16(block.data(), fp16_half);
  for (int i = 0; i < 32; ++i) block[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(i == 0 ? -127 : 4 * i - 60));
  const auto y = dequantize(TensorType::q8_0, block, 32);
  EXPECT_EQ(y[0], -63.5f);
  for (int i = 1; i < 32; ++i) EXPECT_EQ(y[i], 0.5f * static_cast<float>(4 * i - 60)) << i;

  // The quantiser rebuilds the same bytes (amax -63.5 gives d = 0.5 exactly).
  std::vector<uint8_t> again(34);
  quantize_row(TensorType::q8_0, y.data(), again.data(), 32);
  EXPECT_EQ(again, block);
}

TEST(ops_quant, Q4_0HandBuilt) {
  std::vector<uint8_t> block(18);
  put_u16(block.data(), fp16_half);
  for (int j = 0; j < 16; ++j) block[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = dequantize(TensorType::q4_0, block, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * static_cast<float>(j - 8)) << j;       // low nibbles: elements 0..15
    EXPECT_EQ(y[16 + j], 0.5f * static_cast<float>(7 - j)) << j;  // high nibbles: 16..31
  }
  // -4 (q = 0) is the value of largest magnitude, so d = -4 / -8 = 0.5 and the bytes come back.
  std::vector<uint8_t> again(18);
  quantize_row(TensorType::q4_0, y.data(), again.data(), 32);
  EXPECT_EQ(again, block);
}

TEST(ops_quant, Q4_1HandBuilt) {
  std::vector<uint8_t> block(20);
  put_u16(block.data(), fp16_half);         // d = 0.5
  put_u16(block.data() + 2, fp16_quarter);  // m = 0.25
  for (int j = 0; j < 16; ++j) block[4 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = dequantize(TensorType::q4_1, block, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * static_cast<float>(j) + 0.25f) << j;            // low nibbles: elements 0..15
    EXPECT_EQ(y[16 + j], 0.5f * static_cast<float>(15 - j) + 0.25f) << j;  // high nibbles: 16..31
  }
  // min 0.25 and max 7.75 span 15 steps of 0.5, so quantising gives the same bytes back.
  std::vector<uint8_t> again(20);
  quantize_row(TensorType::q4_1, y.data(), again.data(), 32);
  EXPECT_EQ(again, block);
}

TEST(ops_quant, Q5_0HandBuilt) {
  std::vector<uint8_t> block(22);
  put_u16(block.data(), fp16_half);
  // qh = bits 5, 15 and 31 (little-endian): the 5th bits of elements 5, 15 and 31.
  const std::array<uint8_t, 4> qh = {0x20, 0x80, 0x00, 0x80};
  std::memcpy(block.data() + 2, qh.data(), 4);
  for (int j = 0; j < 16; ++j) block[6 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = dequantize(TensorType::q5_0, block, 32);
  // A few worked by hand: value = 0.5 * (q - 16).
  EXPECT_EQ(y[0], -8.0f);   // nibble 0, no 5th bit: q = 0
  EXPECT_EQ(y[1], -7.5f);   // q = 1
  EXPECT_EQ(y[5], 2.5f);    // nibble 5 + 16 = 21
  EXPECT_EQ(y[15], 7.5f);   // nibble 15 + 16 = 31
  EXPECT_EQ(y[16], -0.5f);  // high nibble of byte 0 = 15, no 5th bit
  EXPECT_EQ(y[30], -7.5f);  // high nibble of byte 14 = 1
  EXPECT_EQ(y[31], 0.0f);   // high nibble of byte 15 = 0, 5th bit: q = 16
  for (int j = 0; j < 16; ++j) {
    const int lo = j + (j == 5 || j == 15 ? 16 : 0), hi = 15 - j + (j == 15 ? 16 : 0);
    EXPECT_EQ(y[j], 0.5f * static_cast<float>(lo - 16)) << j;       // low nibbles: elements 0..15
    EXPECT_EQ(y[16 + j], 0.5f * static_cast<float>(hi - 16)) << j;  // high nibbles: 16..31
  }
  // -8 (q = 0) is the value of largest magnitude, so d = -8 / -16 = 0.5 and the bytes come back.
  std::vector<uint8_t> again(22);
  quantize_row(TensorType::q5_0, y.data(), again.data(), 32);
  EXPECT_EQ(again, block);
}

// The quantiser against ggml's rule (quantize_row_q5_0_ref), re-derived here from the values:
// max = the value of largest magnitude, d = max / -16, q = min(31, trunc(x / d + 16.5)), packed
// as low nibbles / high nibbles / qh bits.
TEST(ops_quant, Q5_0QuantizerFollowsTheReferenceRule) {
  constexpr int64_t n = 2048;
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    std::vector<float> x(n);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = (i / 32 % 7 == 3 ? 1e-3f : 1.0f) * normal(rng);
    std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // an all-zero block: d = 0, every q = 16
    std::vector<uint8_t> bytes(row_bytes(TensorType::q5_0, n));
    quantize_row(TensorType::q5_0, x.data(), bytes.data(), n);
    for (int64_t b = 0; b < n / 32; ++b) {
      const float* xb = x.data() + b * 32;
      float max = 0.0f;
      for (int i = 0; i < 32; ++i) {
        if (std::fabs(xb[i]) > std::fabs(max)) max = xb[i];
      }
      const float d = max / -16.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      std::array<int, 32> q{};
      for (int i = 0; i < 32; ++i) q[static_cast<size_t>(i)] = std::min(31, static_cast<int>(xb[i] * id + 16.5f));
      std::vector<uint8_t> expected(22, 0);
      const uint16_t d_bits = f32_to_fp16(d);
      expected[0] = static_cast<uint8_t>(d_bits & 0xff);
      expected[1] = static_cast<uint8_t>(d_bits >> 8);
      for (int i = 0; i < 32; ++i) {
        const int v = q[static_cast<size_t>(i)];
        ASSERT_GE(v, 0);
        if (v & 16) expected[static_cast<size_t>(2 + i / 8)] |= static_cast<uint8_t>(1 << (i % 8));
        expected[static_cast<size_t>(6 + i % 16)] |= static_cast<uint8_t>((v & 15) << (i < 16 ? 0 : 4));
      }
      const std::vector<uint8_t> got(bytes.begin() + b * 22, bytes.begin() + (b + 1) * 22);
      ASSERT_EQ(got, expected) << "seed " << seed << " block " << b;
    }
  }
}

TEST(ops_quant, Q4_KHandBuilt) {
  // Sub-block scales and mins, several above 15 so that their top bits go to bytes 0-7.
  const std::array<int, 8> scale = {1, 2, 3, 4, 17, 33, 50, 63};
  const std::array<int, 8> min = {0, 5, 10, 63, 16, 31, 47, 62};
  std::vector<uint8_t> block(144);
  put_u16(block.data(), fp16_quarter);   // d
  put_u16(block.data() + 2, fp16_half);  // dmin
  // The 12 packed bytes, worked out by hand from get_scale_min_k4's layout.
  const std::array<uint8_t, 12> packed = {0x41, 0x82, 0xc3, 0xc4, 0x40, 0x45, 0x8a, 0xff, 0x01, 0xf1, 0xf2, 0xef};
  std::memcpy(block.data() + 4, packed.data(), packed.size());
  for (int g = 0; g < 4; ++g) {
    for (int l = 0; l < 32; ++l) block[16 + 32 * g + l] = static_cast<uint8_t>((l & 15) | (((l + g) & 15) << 4));
  }
  const auto y = dequantize(TensorType::q4_k, block, 256);
  for (int g = 0; g < 4; ++g) {
    for (int l = 0; l < 32; ++l) {
      const float lo = 0.25f * static_cast<float>(scale[2 * g] * (l & 15)) - 0.5f * static_cast<float>(min[2 * g]);
      const float hi =
          0.25f * static_cast<float>(scale[2 * g + 1] * ((l + g) & 15)) - 0.5f * static_cast<float>(min[2 * g + 1]);
      EXPECT_EQ(y[64 * g + l], lo) << "g " << g << " l " << l;
      EXPECT_EQ(y[64 * g + 32 + l], hi) << "g " << g << " l " << l;
    }
  }
}

TEST(ops_quant, Q6_KHandBuiltLiteral) {
  // Every ql byte 0x21 and every qh byte 0b11100100: in each half, element l (l < 32) has
  // q = 1 | 0 << 4, l + 32 has 1 | 1 << 4, l + 64 has 2 | 2 << 4, l + 96 has 2 | 3 << 4.
  std::vector<uint8_t> block(210);
  std::fill(block.begin(), block.begin() + 128, uint8_t{0x21});
  std::fill(block.begin() + 128, block.begin() + 192, uint8_t{0xe4});
  std::fill(block.begin() + 192, block.begin() + 208, uint8_t{1});
  put_u16(block.data() + 208, fp16_one);
  const auto y = dequantize(TensorType::q6_k, block, 256);
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      EXPECT_EQ(y[128 * h + l], 1.0f - 32.0f);
      EXPECT_EQ(y[128 * h + 32 + l], 17.0f - 32.0f);
      EXPECT_EQ(y[128 * h + 64 + l], 34.0f - 32.0f);
      EXPECT_EQ(y[128 * h + 96 + l], 50.0f - 32.0f);
    }
  }
}

TEST(ops_quant, Q6_KHandBuiltPattern) {
  // Distinct 6-bit values and signed scales, packed following the documented layout.
  std::array<int, 256> q{};
  for (int e = 0; e < 256; ++e) q[static_cast<size_t>(e)] = (e * 7 + 3) % 64;
  std::vector<uint8_t> block(210);
  for (int h = 0; h < 2; ++h) {
    const int* qq = q.data() + 128 * h;
    for (int l = 0; l < 32; ++l) {
      block[static_cast<size_t>(64 * h + l)] = static_cast<uint8_t>((qq[l] & 15) | ((qq[l + 64] & 15) << 4));
      block[static_cast<size_t>(64 * h + 32 + l)] = static_cast<uint8_t>((qq[l + 32] & 15) | ((qq[l + 96] & 15) << 4));
      block[static_cast<size_t>(128 + 32 * h + l)] = static_cast<uint8_t>(
          (qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) | ((qq[l + 64] >> 4) << 4) | ((qq[l + 96] >> 4) << 6));
    }
  }
  for (int s = 0; s < 16; ++s)
    block[static_cast<size_t>(192 + s)] = static_cast<uint8_t>(static_cast<int8_t>(3 * (s - 8)));
  put_u16(block.data() + 208, fp16_eighth);
  const auto y = dequantize(TensorType::q6_k, block, 256);
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(y[static_cast<size_t>(e)],
              0.125f * static_cast<float>(3 * (e / 16 - 8) * (q[static_cast<size_t>(e)] - 32)))
        << e;
  }
}

TEST(ops_quant, F16ExactAndRounding) {
  const struct {
    uint16_t bits;
    float value;
  } exact[] = {{0x3c00, 1.0f},       {0xc000, -2.0f},           {0x7bff, 65504.0f},
               {0x0001, 0x1p-24f},   {0x03ff, 1023 * 0x1p-24f}, {0x0400, 0x1p-14f},
               {0x3800, 0.5f},       {0x8000, -0.0f},           {0x7c00, std::numeric_limits<float>::infinity()},
               {0x3555, 0x1.554p-2f}};
  for (const auto& e : exact) {
    std::vector<uint8_t> bytes(2);
    put_u16(bytes.data(), e.bits);
    const auto y = dequantize(TensorType::f16, bytes, 1);
    EXPECT_EQ(y[0], e.value);
    EXPECT_EQ(std::signbit(y[0]), std::signbit(e.value));
    std::vector<uint8_t> again(2);
    quantize_row(TensorType::f16, &e.value, again.data(), 1);
    EXPECT_EQ(again, bytes) << e.value;
  }
  const struct {
    float in, out;
  } rounding[] = {{1.0f + 0x1p-11f, 1.0f},                // tie -> even
                  {1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-9f},  // tie -> even (up)
                  {1.0f + 0x1p-11f + 0x1p-20f, 1.0f + 0x1p-10f},
                  {65519.0f, 65504.0f},
                  {65520.0f, std::numeric_limits<float>::infinity()},
                  {0x1p-25f, 0.0f},  // tie between 0 and the smallest subnormal
                  {0x1.8p-25f, 0x1p-24f},
                  {3 * 0x1p-25f, 2 * 0x1p-24f}};  // subnormal tie -> even
  for (const auto& r : rounding) {
    std::vector<uint8_t> bytes(2);
    quantize_row(TensorType::f16, &r.in, bytes.data(), 1);
    EXPECT_EQ(dequantize(TensorType::f16, bytes, 1)[0], r.out) << r.in;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint8_t> bytes(2);
  quantize_row(TensorType::f16, &nan, bytes.data(), 1);
  EXPECT_TRUE(std::isnan(dequantize(TensorType::f16, bytes, 1)[0]));
}

TEST(ops_quant, BF16ExactAndRounding) {
  const float exact[] = {1.0f, -2.5f, 0x1p-130f, 3.0e38f, -0.0f, 0x1.fep+127f};
  for (const float v : exact) {
    const float representable = std::bit_cast<float>(std::bit_cast<uint32_t>(v) & 0xffff0000u);
    std::vector<uint8_t> bytes(2);
    quantize_row(TensorType::bf16, &representable, bytes.data(), 1);
    EXPECT_EQ(dequantize(TensorType::bf16, bytes, 1)[0], representable);
  }
  std::vector<uint8_t> one(2);
  put_u16(one.data(), 0x3f80);
  EXPECT_EQ(dequantize(TensorType::bf16, one, 1)[0], 1.0f);
  const struct {
    float in, out;
  } rounding[] = {{1.0f + 0x1p-8f, 1.0f},                // tie -> even
                  {1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-6f},  // tie -> even (up)
                  {1.0f + 0x1p-8f + 0x1p-20f, 1.0f + 0x1p-7f}};
  for (const auto& r : rounding) {
    std::vector<uint8_t> bytes(2);
    quantize_row(TensorType::bf16, &r.in, bytes.data(), 1);
    EXPECT_EQ(dequantize(TensorType::bf16, bytes, 1)[0], r.out) << r.in;
  }
}

// Random rows with a spread of magnitudes per block, a few outliers and a few all-zero blocks.
std::vector<float> random_row(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> magnitude(-3.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t b = 0; b < n / 32; ++b) {
    const float block_scale = b % 13 == 5 ? 0.0f : std::pow(10.0f, magnitude(rng));
    for (int64_t i = 0; i < 32; ++i) x[static_cast<size_t>(b * 32 + i)] = block_scale * normal(rng);
  }
  x[7] = 25.0f;  // an outlier
  return x;
}

float max_abs(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

struct RoundTrip {
  std::vector<float> x, y;
};

RoundTrip round_trip(TensorType type, int64_t n, uint32_t seed) {
  RoundTrip r{random_row(n, seed), std::vector<float>(static_cast<size_t>(n))};
  std::vector<uint8_t> bytes(row_bytes(type, n));
  quantize_row(type, r.x.data(), bytes.data(), n);
  dequantize_row(type, bytes.data(), r.y.data(), n);
  return r;
}

// Per-element error bounds, each in terms of the block the element belongs to:
//  Q8_0: amax/254 (rounding) + amax/2048 (d rounded to fp16 after q was chosen), and for tiny
//        blocks (d below 2^-14, an fp16 subnormal) 127 * 2^-25, d's absolute rounding error.
//  Q4_0: d = amax/8: the sign opposite to the largest value is clamped one step short; plus
//        8 * 2^-25 for subnormal d.
//  Q4_K: half a step of the coarsest sub-block plus half a quantised min, within range/15.
//  Q6_K: one step of the sub-block (the sign opposite its largest value is clamped), the step
//        being rounded up by at most the super-block's d = max amax / (32 * 127).
TEST(ops_quant, RoundTripBounds) {
  constexpr int64_t n = 4096;
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    {
      const auto r = round_trip(TensorType::q8_0, n, seed);
      for (int64_t i = 0; i < n; ++i) {
        const float amax = max_abs(r.x.data() + i / 32 * 32, 32);
        ASSERT_LE(std::fabs(r.y[i] - r.x[i]), amax * (1.0f / 254 + 1.0f / 2048) + 127 * 0x1p-25f) << i;
      }
    }
    {
      const auto r = round_trip(TensorType::q4_0, n, seed);
      for (int64_t i = 0; i < n; ++i) {
        const float amax = max_abs(r.x.data() + i / 32 * 32, 32);
        ASSERT_LE(std::fabs(r.y[i] - r.x[i]), amax / 8 * (1.0f + 1.0f / 128) + 8 * 0x1p-25f) << i;
      }
    }
    {
      // Q5_0: d = amax / 16, so half a step d / 2, except where the sign opposite to the largest
      // value is clamped at q = 31 (beyond 15.5 steps): one step. Plus d's fp16 rounding over at
      // most 16 steps (relative 2^-11) and 16 * 2^-25 for subnormal d.
      const auto r = round_trip(TensorType::q5_0, n, seed);
      for (int64_t i = 0; i < n; ++i) {
        const float d = max_abs(r.x.data() + i / 32 * 32, 32) / 16;
        const float step = std::fabs(r.x[i]) > 15.5f * d ? d : d / 2;
        ASSERT_LE(std::fabs(r.y[i] - r.x[i]), step + d / 128 + 16 * 0x1p-25f) << i;
      }
    }
    {
      // Q4_1: half a step of (max - min) / 15, the step and min rounded to fp16 (relative 2^-11).
      const auto r = round_trip(TensorType::q4_1, n, seed);
      for (int64_t i = 0; i < n; ++i) {
        const float* b = r.x.data() + i / 32 * 32;
        const float range = *std::max_element(b, b + 32) - *std::min_element(b, b + 32);
        const float amax = max_abs(b, 32);
        ASSERT_LE(std::fabs(r.y[i] - r.x[i]), range / 30 + (range + amax) / 1024 + 16 * 0x1p-25f) << i;
      }
    }
    {
      const auto r = round_trip(TensorType::q4_k, n, seed);
      for (int64_t i = 0; i < n; ++i) {
        const float* sb = r.x.data() + i / 256 * 256;
        const float range = *std::max_element(sb, sb + 256) - std::min(0.0f, *std::min_element(sb, sb + 256));
        ASSERT_LE(std::fabs(r.y[i] - r.x[i]), range / 15) << i;
      }
    }
    {
      const auto r = round_trip(TensorType::q6_k, n, seed);
      for (int64_t i = 0; i < n; ++i) {
        const float amax_sub = max_abs(r.x.data() + i / 16 * 16, 16);
        const float amax_super = max_abs(r.x.data() + i / 256 * 256, 256);
        ASSERT_LE(std::fabs(r.y[i] - r.x[i]), amax_sub / 32 + amax_super / (32 * 127) * 1.01f) << i;
      }
    }
  }
}

// Typical accuracy: RMS error relative to the RMS of each block, averaged over blocks of
// normal data (the figures llama.cpp's quantize-stats would call sensible).
TEST(ops_quant, RoundTripRelativeRms) {
  constexpr int64_t n = 1 << 16;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  const struct {
    TensorType type;
    double max_relative_rms;
  } cases[] = {{TensorType::q8_0, 0.007}, {TensorType::q6_k, 0.03}, {TensorType::q4_k, 0.12},
               {TensorType::q4_0, 0.15},  {TensorType::q4_1, 0.12}, {TensorType::q5_0, 0.075},
               {TensorType::f16, 4e-4},   {TensorType::bf16, 3e-3}};
  for (const auto& c : cases) {
    std::vector<uint8_t> bytes(row_bytes(c.type, n));
    std::vector<float> y(n);
    quantize_row(c.type, x.data(), bytes.data(), n);
    dequantize_row(c.type, bytes.data(), y.data(), n);
    double err = 0.0, ref = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      err += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
      ref += static_cast<double>(x[i]) * x[i];
    }
    const double relative = std::sqrt(err / ref);
    EXPECT_LE(relative, c.max_relative_rms) << tensor_type_name(static_cast<uint32_t>(c.type));
    RecordProperty(std::string(tensor_type_name(static_cast<uint32_t>(c.type))) + "_relative_rms",
                   std::to_string(relative));
  }
}

TEST(ops_quant, ZerosStayZero) {
  for (const auto type :
       {TensorType::q8_0, TensorType::q4_0, TensorType::q4_1, TensorType::q5_0, TensorType::q4_k, TensorType::q6_k}) {
    std::vector<float> x(512, 0.0f), y(512, 1.0f);
    std::vector<uint8_t> bytes(row_bytes(type, 512));
    quantize_row(type, x.data(), bytes.data(), 512);
    dequantize_row(type, bytes.data(), y.data(), 512);
    for (const float v : y) ASSERT_EQ(v, 0.0f) << tensor_type_name(static_cast<uint32_t>(type));
  }
}

TEST(ops_quant, F32IsACopy) {
  const std::vector<float> x = {1.5f, -0.0f, 3.0e-40f, 7.0f};
  std::vector<uint8_t> bytes(16);
  quantize_row(TensorType::f32, x.data(), bytes.data(), 4);
  const auto y = dequantize(TensorType::f32, bytes, 4);
  EXPECT_EQ(std::memcmp(x.data(), y.data(), 16), 0);
}

}  // namespace
}  // namespace squeezekv
