// The KIVI storage kernels: hand-built groups (bytes and decoded values worked out by hand), the
// rounding of mins and scales, the quantization error bound on many shapes, and the SIMD kernels
// against their scalar twins (bit for bit, on every compiled target), against the weighted value
// sum's documented order written out, and against decoding first.
#include "squeezekv/ops/kivi_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "hwy_targets.h"
#include "squeezekv/base/fp16.h"

namespace squeezekv {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::string shape_name(int bits, size_t group, size_t head_dim) {
  return "bits " + std::to_string(bits) + " group " + std::to_string(group) + " head_dim " + std::to_string(head_dim);
}

uint16_t u16_at(const uint8_t* p) { return load_u16(p); }
float half(const uint8_t* p) { return fp16_to_f32(load_u16(p)); }
// The fp16 just above h (h finite, not the largest).
float half_above(uint16_t h) {
  if (h == 0x8000 || h == 0) return fp16_to_f32(1);
  return fp16_to_f32((h & 0x8000) != 0 ? uint16_t(h - 1) : uint16_t(h + 1));
}

// ---- kivi_unfit ----

TEST(Kivi, UnfitAcceptsAndRejects) {
  struct Case {
    int bits;
    size_t group, head_dim;
    bool fits;
  };
  const Case cases[] = {
      {4, 32, 64, true},      {2, 32, 64, true},      {4, 32, 128, true}, {2, 128, 128, true},    {4, 8, 8, true},
      {2, 8, 8, true},        {4, 32, 8, true},       {2, 32, 8, true},   {2, 32, 4, true},       {4, 32, 6, true},
      {4, 1024, 1024, true},  {2, 24, 48, true},      {4, 16, 8, true},   {3, 32, 64, false},     {8, 32, 64, false},
      {1, 32, 64, false},     {0, 32, 64, false},     {4, 0, 64, false},  {4, 4, 64, false},      {4, 12, 48, false},
      {4, 1032, 2064, false}, {4, 2048, 2048, false}, {4, 32, 48, false}, {2, 32, 96 + 8, false}, {2, 32, 6, false},
      {2, 32, 3, false},      {4, 32, 3, false},      {4, 32, 0, false},
  };
  for (const Case& c : cases) {
    const char* why = kivi_unfit(c.bits, c.group, c.head_dim);
    ASSERT_NE(why, nullptr);
    EXPECT_EQ(why[0] == '\0', c.fits) << shape_name(c.bits, c.group, c.head_dim) << ": \"" << why << "\"";
  }
}

// ---- Hand-built groups ----

// A channel of a hand key group: min, scale, and the codes of tokens 0..7.
struct HandChannel {
  float m, s;
  unsigned codes[8];
};

// head_dim 8, G 8, b = 2 (codes 0..3). Each non-constant channel uses codes 0 and 3, so
// quantizing the decoded values gives back the same min, scale and codes.
const HandChannel kKeys2[8] = {
    {0.0f, 1.0f, {0, 1, 2, 3, 3, 2, 1, 0}},    {-1.5f, 0.5f, {3, 0, 1, 2, 0, 3, 2, 1}},
    {2.0f, 0.0f, {0, 0, 0, 0, 0, 0, 0, 0}},    {-4.0f, 2.0f, {1, 1, 0, 3, 2, 2, 1, 0}},
    {0.25f, 0.125f, {0, 3, 3, 3, 3, 3, 3, 3}}, {-8.0f, 4.0f, {2, 1, 3, 0, 0, 0, 0, 0}},
    {100.0f, 0.25f, {3, 2, 1, 0, 1, 2, 3, 0}}, {0.0f, 0.0f, {0, 0, 0, 0, 0, 0, 0, 0}},
};
// Its 48 bytes: 8 fp16 mins, 8 fp16 scales, then per channel 2 bytes; byte j holds the codes of
// tokens j, j + 2, j + 4, j + 6 at bits 0, 2, 4, 6. Channel 0 (codes 0 1 2 3 3 2 1 0):
// byte 0 = 0 | 2 << 2 | 3 << 4 | 1 << 6 = 0x78, byte 1 = 1 | 3 << 2 | 2 << 4 | 0 << 6 = 0x2D.
const uint8_t kKeys2Bytes[48] = {
    0x00, 0x00, 0x00, 0xBE, 0x00, 0x40, 0x00, 0xC4, 0x00, 0x34, 0x00, 0xC8, 0x40, 0x56, 0x00, 0x00,  // mins
    0x00, 0x3C, 0x00, 0x38, 0x00, 0x00, 0x00, 0x40, 0x00, 0x30, 0x00, 0x44, 0x00, 0x34, 0x00, 0x00,  // scales
    0x78, 0x2D, 0x87, 0x78, 0x00, 0x00, 0x61, 0x2D, 0xFC, 0xFF, 0x0E, 0x01, 0xD7, 0x22, 0x00, 0x00,  // codes
};
// The decoded keys: row j = token j (m + s * code, by hand).
const float kKeys2Rows[8][8] = {
    {0, 0.0f, 2, -2, 0.25f, 0, 100.75f, 0},    {1, -1.5f, 2, -2, 0.625f, -4, 100.5f, 0},
    {2, -1.0f, 2, -4, 0.625f, 4, 100.25f, 0},  {3, -0.5f, 2, 2, 0.625f, -8, 100.0f, 0},
    {3, -1.5f, 2, 0, 0.625f, -8, 100.25f, 0},  {2, 0.0f, 2, 0, 0.625f, -8, 100.5f, 0},
    {1, -0.5f, 2, -2, 0.625f, -8, 100.75f, 0}, {0, -1.0f, 2, -4, 0.625f, -8, 100.0f, 0},
};

// head_dim 8, G 8, b = 4 (codes 0..15), including the extremes of fp16 (-65504 + 8192 * 15).
const HandChannel kKeys4[8] = {
    {0.0f, 1.0f, {0, 15, 7, 8, 1, 2, 3, 4}},
    {-3.0f, 0.5f, {15, 0, 1, 14, 2, 13, 3, 12}},
    {-2.5f, 0.0f, {0, 0, 0, 0, 0, 0, 0, 0}},
    {1024.0f, 64.0f, {0, 1, 2, 3, 4, 5, 6, 15}},
    {-65504.0f, 8192.0f, {15, 0, 7, 8, 3, 12, 1, 14}},
    {-0.0625f, 0.0078125f, {5, 0, 15, 9, 10, 11, 12, 13}},
    {0.0f, 0.0f, {0, 0, 0, 0, 0, 0, 0, 0}},
    {7.0f, 0.25f, {8, 4, 2, 1, 0, 15, 3, 6}},
};
// Per channel 4 bytes; byte j holds token j in its low nibble and token j + 4 in its high one.
// Channel 0 (codes 0 15 7 8 1 2 3 4): 0x10, 0x2F, 0x37, 0x48.
const uint8_t kKeys4Bytes[64] = {
    0x00, 0x00, 0x00, 0xC2, 0x00, 0xC1, 0x00, 0x64, 0xFF, 0xFB, 0x00, 0xAC, 0x00, 0x00, 0x00, 0x47,  // mins
    0x00, 0x3C, 0x00, 0x38, 0x00, 0x00, 0x00, 0x54, 0x00, 0x70, 0x00, 0x20, 0x00, 0x00, 0x00, 0x34,  // scales
    0x10, 0x2F, 0x37, 0x48, 0x2F, 0xD0, 0x31, 0xCE, 0x00, 0x00, 0x00, 0x00, 0x40, 0x51, 0x62, 0xF3,  // d 0-3
    0x3F, 0xC0, 0x17, 0xE8, 0xA5, 0xB0, 0xCF, 0xD9, 0x00, 0x00, 0x00, 0x00, 0x08, 0xF4, 0x32, 0x61,  // d 4-7
};
const float kKeys4Rows[8][8] = {
    {0, 4.5f, -2.5f, 1024, 57376, -0.0234375f, 0, 9.0f}, {15, -3.0f, -2.5f, 1088, -65504, -0.0625f, 0, 8.0f},
    {7, -2.5f, -2.5f, 1152, -8160, 0.0546875f, 0, 7.5f}, {8, 4.0f, -2.5f, 1216, 32, 0.0078125f, 0, 7.25f},
    {1, -2.0f, -2.5f, 1280, -40928, 0.015625f, 0, 7.0f}, {2, 3.5f, -2.5f, 1344, 32800, 0.0234375f, 0, 10.75f},
    {3, -1.5f, -2.5f, 1408, -57312, 0.03125f, 0, 7.75f}, {4, 3.0f, -2.5f, 1984, 49184, 0.0390625f, 0, 8.5f},
};

void check_hand_key_group(int bits, const HandChannel (&channels)[8], const uint8_t* expected_bytes,
                          const float (&rows)[8][8]) {
  constexpr size_t G = 8, hd = 8;
  const size_t bytes = kivi_key_group_bytes(bits, G, hd);
  ASSERT_EQ(bytes, bits == 2 ? 48u : 64u);
  // The hand tables agree with themselves: the bytes' mins and scales, rows = m + s * code.
  for (size_t d = 0; d < hd; ++d) {
    EXPECT_EQ(half(expected_bytes + 2 * d), channels[d].m);
    EXPECT_EQ(half(expected_bytes + 2 * (hd + d)), channels[d].s);
    for (size_t j = 0; j < G; ++j) EXPECT_EQ(rows[j][d], channels[d].m + channels[d].s * float(channels[d].codes[j]));
  }
  // Decoding the hand bytes gives the hand rows exactly.
  for (size_t j = 0; j < G; ++j) {
    float out[hd];
    kivi_load_key(expected_bytes, bits, G, hd, j, out);
    for (size_t d = 0; d < hd; ++d) {
      EXPECT_EQ(out[d], rows[j][d]) << "bits " << bits << " token " << j << " channel " << d;
    }
  }
  // Quantizing the rows (stored with an odd stride) gives the hand bytes exactly.
  constexpr size_t ld = hd + 3;
  std::vector<float> x(G * ld, kNaN);
  for (size_t j = 0; j < G; ++j) std::copy(rows[j], rows[j] + hd, x.data() + j * ld);
  std::vector<uint8_t> got(bytes + 4, 0xA5);
  kivi_quantize_key_group(x.data(), ld, nullptr, bits, G, hd, got.data());
  for (size_t i = 0; i < bytes; ++i) EXPECT_EQ(int(got[i]), int(expected_bytes[i])) << "bits " << bits << " byte " << i;
  for (size_t i = bytes; i < got.size(); ++i) EXPECT_EQ(got[i], 0xA5) << "wrote past the group";
  // Every row included explicitly is the same.
  const std::vector<uint8_t> all(G, 1);
  std::vector<uint8_t> again(bytes);
  kivi_quantize_key_group(x.data(), ld, all.data(), bits, G, hd, again.data());
  EXPECT_EQ(std::vector<uint8_t>(got.begin(), got.begin() + long(bytes)), again);
}

TEST(Kivi, HandKeyGroupTwoBit) { check_hand_key_group(2, kKeys2, kKeys2Bytes, kKeys2Rows); }
TEST(Kivi, HandKeyGroupFourBit) { check_hand_key_group(4, kKeys4, kKeys4Bytes, kKeys4Rows); }

// Value rows of head_dim 16 with G 8: two groups of 8 channels, each fp16 min, fp16 scale, run.
TEST(Kivi, HandValueRows) {
  struct Hand {
    int bits;
    std::vector<uint8_t> bytes;
    std::vector<float> row;
  };
  const Hand hands[] = {
      // group 0: m -1, s 0.5, codes 0 1 2 3 3 2 1 0 (bytes 0x78 0x2D as key channel 0 above);
      // group 1: constant 3 (s 0, codes 0).
      {2,
       {0x00, 0xBC, 0x00, 0x38, 0x78, 0x2D, 0x00, 0x42, 0x00, 0x00, 0x00, 0x00},
       {-1, -0.5f, 0, 0.5f, 0.5f, 0, -0.5f, -1, 3, 3, 3, 3, 3, 3, 3, 3}},
      // group 0: m -2, s 0.25, codes 0 15 1 14 2 13 3 12: bytes 0x20 0xDF 0x31 0xCE;
      // group 1: m 0.5, s 2, codes 15 14 13 12 0 1 2 3: bytes 0x0F 0x1E 0x2D 0x3C.
      {4,
       {0x00, 0xC0, 0x00, 0x34, 0x20, 0xDF, 0x31, 0xCE, 0x00, 0x38, 0x00, 0x40, 0x0F, 0x1E, 0x2D, 0x3C},
       {-2, 1.75f, -1.75f, 1.5f, -1.5f, 1.25f, -1.25f, 1, 30.5f, 28.5f, 26.5f, 24.5f, 0.5f, 2.5f, 4.5f, 6.5f}},
  };
  constexpr size_t G = 8, hd = 16;
  for (const Hand& h : hands) {
    SCOPED_TRACE(h.bits);
    ASSERT_EQ(kivi_value_row_bytes(h.bits, G, hd), h.bytes.size());
    std::vector<float> out(hd);
    kivi_load_value_row(h.bytes.data(), h.bits, G, hd, out.data());
    EXPECT_EQ(out, h.row);
    std::vector<uint8_t> got(h.bytes.size() + 4, 0xA5);
    kivi_quantize_value_row(h.row.data(), h.bits, G, hd, got.data());
    EXPECT_EQ(std::vector<uint8_t>(got.begin(), got.begin() + long(h.bytes.size())), h.bytes);
    for (size_t i = h.bytes.size(); i < got.size(); ++i) EXPECT_EQ(got[i], 0xA5) << "wrote past the row";
  }
}

// Longer runs: G 32 keys, channel 0 holding token j's code at byte j % nb, bits b * (j / nb).
TEST(Kivi, PackingOrderOfLongRuns) {
  constexpr size_t G = 32, hd = 8;
  for (int bits : {2, 4}) {
    SCOPED_TRACE(bits);
    const size_t nb = G * size_t(bits) / 8;
    // 4 bits: codes j % 16 (s = 1), so byte j holds codes j and j + 16: 0x00, 0x11, ..., 0xFF.
    // 2 bits: codes j % 4, so byte j holds j % 4 four times: 0x00, 0x55, 0xAA, 0xFF, ...
    // Channel 1: codes j / 8 (2 bits) or j / 2 (4 bits): every byte of 2 bits is 0b11100100.
    std::vector<float> x(G * hd, 0.0f);
    for (size_t j = 0; j < G; ++j) {
      x[j * hd + 0] = float(bits == 4 ? j % 16 : j % 4);
      x[j * hd + 1] = float(bits == 4 ? j / 2 : j / 8);
    }
    std::vector<uint8_t> kg(kivi_key_group_bytes(bits, G, hd));
    kivi_quantize_key_group(x.data(), hd, nullptr, bits, G, hd, kg.data());
    EXPECT_EQ(u16_at(kg.data() + 2 * hd), 0x3C00);  // scale 1
    EXPECT_EQ(u16_at(kg.data() + 2 * hd + 2), 0x3C00);
    const uint8_t* run0 = kg.data() + 4 * hd;
    const uint8_t* run1 = run0 + nb;
    for (size_t j = 0; j < nb; ++j) {
      EXPECT_EQ(int(run0[j]), bits == 4 ? int(0x11 * j) : int(0x55 * (j % 4))) << j;
      // 4 bits: byte j holds codes j / 2 and (j + 16) / 2 = j / 2 + 8.
      EXPECT_EQ(int(run1[j]), bits == 4 ? int(j / 2 + ((j / 2 + 8) << 4)) : 0xE4) << j;
    }
    for (size_t j = 0; j < G; ++j) {
      float row[hd];
      kivi_load_key(kg.data(), bits, G, hd, j, row);
      EXPECT_EQ(row[0], x[j * hd + 0]);
      EXPECT_EQ(row[1], x[j * hd + 1]);
    }
  }
}

// The min rounds down and the scale up, in fp16 bit space, through zero and negative numbers.
TEST(Kivi, MinRoundsDownAndScaleUp) {
  struct Case {
    float lo, hi;
    int bits;
    uint16_t m, s;
  };
  const Case cases[] = {
      {0.1f, 0.5f, 2, 0x2E66, 0},           // fp16(0.1) = 0.0999755859375 <= 0.1: kept
      {-0.1f, 1.0f, 2, 0xAE67, 0x35DE},     // fp16(-0.1) = -0.0999755859375 > -0.1: one ulp down
      {0.0f, 3.0f, 4, 0x0000, 0x3267},      // 3 / 15: fp16(0.2) = 0.19995 < 0.2, so 0.2000732421875
      {-1e-9f, 1.0f, 4, 0x8001, 0},         // rounds to -0 > x: the smallest negative subnormal
      {1e-9f, 1.0f, 4, 0x0000, 0},          // rounds to +0 <= x
      {-0.0f, 1.0f, 4, 0x0000, 0x2C45},     // -0 stored as +0; 1 / 15 rounded up
      {-65504.0f, 65504.0f, 2, 0xFBFF, 0},  // the widest range: s = 131008 / 3 rounded up
      {-65500.0f, 65504.0f, 4, 0xFBFF, 0}, {65504.0f, 65504.0f, 4, 0x7BFF, 0},  // constant: s = 0
  };
  constexpr size_t G = 8, hd = 8;
  for (const Case& c : cases) {
    for (int rep = 0; rep < 2; ++rep) {  // as a value group, then as a key channel
      SCOPED_TRACE(std::to_string(c.lo) + " .. " + std::to_string(c.hi) + (rep ? " key" : " value"));
      std::vector<float> x(hd);
      for (size_t i = 0; i < hd; ++i) x[i] = c.lo + (c.hi - c.lo) * float(i) / float(hd - 1);
      x[0] = c.lo;
      x[hd - 1] = c.hi;
      uint16_t m16, s16;
      if (rep == 0) {
        std::vector<uint8_t> row(kivi_value_row_bytes(c.bits, G, hd));
        kivi_quantize_value_row(x.data(), c.bits, G, hd, row.data());
        m16 = u16_at(row.data());
        s16 = u16_at(row.data() + 2);
      } else {
        std::vector<float> rows(G * hd, 0.0f);
        for (size_t j = 0; j < G; ++j) rows[j * hd + 3] = x[j];
        std::vector<uint8_t> kg(kivi_key_group_bytes(c.bits, G, hd));
        kivi_quantize_key_group(rows.data(), hd, nullptr, c.bits, G, hd, kg.data());
        m16 = u16_at(kg.data() + 2 * 3);
        s16 = u16_at(kg.data() + 2 * (hd + 3));
      }
      EXPECT_EQ(m16, c.m);
      if (c.s != 0) {
        EXPECT_EQ(s16, c.s);
      }
      // Whatever the case: m is the largest fp16 <= lo, s the smallest fp16 covering hi.
      const double levels = double((1 << c.bits) - 1);
      EXPECT_LE(fp16_to_f32(m16), c.lo);
      EXPECT_GT(half_above(m16), c.lo);
      if (c.hi == c.lo) {
        EXPECT_EQ(s16, 0);
      } else {
        ASSERT_GT(s16, 0);
        EXPECT_LT(s16, 0x7C00);
        EXPECT_GE(double(fp16_to_f32(m16)) + double(fp16_to_f32(s16)) * levels, double(c.hi));
        EXPECT_LT(double(fp16_to_f32(m16)) + double(fp16_to_f32(uint16_t(s16 - 1))) * levels, double(c.hi));
      }
    }
  }
}

// ---- The error bound on many shapes ----

std::mt19937_64& rng() {
  static std::mt19937_64 r(20240611);
  return r;
}
float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng()); }
float normal() { return std::normal_distribution<float>(0.0f, 1.0f)(rng()); }

// n values of one kind: 0 normal around an offset, 1 constant, 2 huge (up to +-65504, both
// reached), 3 tiny (fp16 subnormal mins and scales), 4 all zero, 5 mixed signs and scales.
std::vector<float> values_of_kind(int kind, size_t n) {
  std::vector<float> x(n);
  const float scale = std::pow(10.0f, uniform(-3.0f, 2.0f)), offset = uniform(-3.0f, 3.0f) * scale;
  const float constant = normal() * 3.0f;
  for (size_t i = 0; i < n; ++i) {
    switch (kind) {
      case 0:
        x[i] = offset + scale * normal();
        break;
      case 1:
        x[i] = constant;
        break;
      case 2:
        x[i] = uniform(-65504.0f, 65504.0f);
        break;
      case 3:
        x[i] = 1e-6f * normal();
        break;
      case 4:
        x[i] = 0.0f;
        break;
      default:
        x[i] = normal() * std::pow(10.0f, uniform(-2.0f, 2.0f));
        break;
    }
  }
  if (kind == 2 && n >= 2) {
    x[0] = 65504.0f;
    x[n - 1] = -65504.0f;
  }
  return x;
}

struct Shape {
  int bits;
  size_t group, head_dim;
};
std::vector<Shape> fitting_shapes(std::initializer_list<size_t> head_dims, std::initializer_list<size_t> groups) {
  std::vector<Shape> out;
  for (int bits : {2, 4}) {
    for (size_t hd : head_dims) {
      for (size_t g : groups) {
        if (kivi_unfit(bits, g, hd)[0] == '\0') out.push_back({bits, g, hd});
      }
    }
  }
  return out;
}

// One group [lo, hi] with min m16 and scale s16, and its values' decoded forms: m and s as
// documented, every value within s / 2 (plus float rounding) of its decoding.
void check_group(const std::vector<float>& x, const std::vector<float>& back, uint16_t m16, uint16_t s16, int bits,
                 const std::string& where) {
  const float lo = *std::min_element(x.begin(), x.end()), hi = *std::max_element(x.begin(), x.end());
  const float m = fp16_to_f32(m16), s = fp16_to_f32(s16);
  ASSERT_LE(m, lo) << where;
  ASSERT_GT(half_above(m16), lo) << where;
  const double levels = double((1 << bits) - 1);
  if (hi == lo) {
    ASSERT_EQ(s16, 0) << where;
  } else {
    ASSERT_TRUE(s16 > 0 && s16 < 0x7C00) << where;
    ASSERT_GE(double(m) + double(s) * levels, double(hi)) << where;
    ASSERT_LT(double(m) + double(fp16_to_f32(uint16_t(s16 - 1))) * levels, double(hi)) << where;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    if (s16 == 0) {
      ASSERT_EQ(back[i], m) << where << " value " << i;  // the constant, rounded down to fp16
      continue;
    }
    const double bound = 0.5 * double(s) + 0x1p-22 * (std::fabs(double(x[i]) - m) + std::fabs(double(back[i])));
    ASSERT_LE(std::fabs(double(x[i]) - double(back[i])), bound) << where << " value " << i << " x " << x[i];
  }
}

TEST(Kivi, QuantizationErrorIsAtMostHalfAStep) {
  for (const Shape& sh : fitting_shapes({4, 8, 16, 32, 64, 128}, {8, 16, 32, 64, 128})) {
    const std::string name = shape_name(sh.bits, sh.group, sh.head_dim);
    const size_t G = sh.group, hd = sh.head_dim, ld = hd + 5;
    for (int trial = 0; trial < 3; ++trial) {
      // Keys: channel d of kind d % 6 (column by column).
      std::vector<float> rows(G * ld, kNaN);
      for (size_t d = 0; d < hd; ++d) {
        const auto col = values_of_kind(int((d + size_t(trial)) % 6), G);
        for (size_t j = 0; j < G; ++j) rows[j * ld + d] = col[j];
      }
      std::vector<uint8_t> kg(kivi_key_group_bytes(sh.bits, G, hd));
      kivi_quantize_key_group(rows.data(), ld, nullptr, sh.bits, G, hd, kg.data());
      std::vector<float> back(G * hd);
      for (size_t j = 0; j < G; ++j) kivi_load_key(kg.data(), sh.bits, G, hd, j, back.data() + j * hd);
      for (size_t d = 0; d < hd; ++d) {
        std::vector<float> x(G), b(G);
        for (size_t j = 0; j < G; ++j) {
          x[j] = rows[j * ld + d];
          b[j] = back[j * hd + d];
        }
        check_group(x, b, u16_at(kg.data() + 2 * d), u16_at(kg.data() + 2 * (hd + d)), sh.bits,
                    name + " key channel " + std::to_string(d));
      }
      // Values: row j of kind j % 6, and one row mixing kinds per group.
      const size_t gv = kivi_value_group(G, hd);
      for (size_t j = 0; j < 7; ++j) {
        std::vector<float> x(hd);
        for (size_t v = 0; v < hd / gv; ++v) {
          const auto part = values_of_kind(j < 6 ? int(j) : int(v % 6), gv);
          std::copy(part.begin(), part.end(), x.begin() + long(v * gv));
        }
        const size_t rb = kivi_value_row_bytes(sh.bits, G, hd);
        std::vector<uint8_t> row(rb);
        kivi_quantize_value_row(x.data(), sh.bits, G, hd, row.data());
        if (j == 4) {
          EXPECT_EQ(row, std::vector<uint8_t>(rb, 0)) << name << ": a zero row stores zero bytes";
        }
        std::vector<float> b(hd);
        kivi_load_value_row(row.data(), sh.bits, G, hd, b.data());
        const size_t nb = gv * size_t(sh.bits) / 8;
        for (size_t v = 0; v < hd / gv; ++v) {
          const uint8_t* grp = row.data() + v * (4 + nb);
          check_group(std::vector<float>(x.begin() + long(v * gv), x.begin() + long((v + 1) * gv)),
                      std::vector<float>(b.begin() + long(v * gv), b.begin() + long((v + 1) * gv)), u16_at(grp),
                      u16_at(grp + 2), sh.bits,
                      name + " value row " + std::to_string(j) + " group " + std::to_string(v));
        }
      }
    }
  }
}

// The channel-by-channel decoders (rows and transposed) give kivi_load_key's floats, for any
// run of rows [first, first + count).
TEST(Kivi, ChannelDecodersEqualTheRowDecoder) {
  for (const Shape& sh : fitting_shapes({8, 32, 64}, {8, 32, 64})) {
    SCOPED_TRACE(shape_name(sh.bits, sh.group, sh.head_dim));
    const size_t G = sh.group, hd = sh.head_dim;
    std::mt19937 rng(uint32_t(G * 131 + hd + size_t(sh.bits)));
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> rows(G * hd);
    for (float& v : rows) v = normal(rng);
    std::vector<uint8_t> kg(kivi_key_group_bytes(sh.bits, G, hd));
    kivi_quantize_key_group(rows.data(), hd, nullptr, sh.bits, G, hd, kg.data());
    std::vector<float> want(G * hd);
    for (size_t j = 0; j < G; ++j) kivi_load_key(kg.data(), sh.bits, G, hd, j, want.data() + j * hd);
    for (const auto& [first, count] : {std::pair<size_t, size_t>{0, G}, {1, G - 1}, {G / 2, G / 4}, {G - 1, 1}}) {
      const size_t ld = count + 3;
      std::vector<float> as_rows(count * hd, kNaN), transposed(hd * ld, kNaN);
      kivi_load_keys(kg.data(), sh.bits, G, hd, first, count, as_rows.data());
      kivi_load_keys_transposed(kg.data(), sh.bits, G, hd, first, count, transposed.data(), ld);
      for (size_t j = 0; j < count; ++j) {
        for (size_t d = 0; d < hd; ++d) {
          ASSERT_EQ(as_rows[j * hd + d], want[(first + j) * hd + d]) << first << " " << j << " " << d;
          ASSERT_EQ(transposed[d * ld + j], want[(first + j) * hd + d]) << first << " " << j << " " << d;
        }
      }
    }
  }
}

// Rows with include[j] == 0 are left out of every channel's min and max (they hold NaN here, so
// reading them would show) and get code 0; a channel with no included row stores m = s = 0.
TEST(Kivi, ExcludedRowsAreLeftOutAndGetCodeZero) {
  for (const Shape& sh : fitting_shapes({8, 64}, {8, 32})) {
    const std::string name = shape_name(sh.bits, sh.group, sh.head_dim);
    const size_t G = sh.group, hd = sh.head_dim, nb = G * size_t(sh.bits) / 8;
    std::vector<float> rows(G * hd);
    std::vector<uint8_t> include(G);
    for (size_t j = 0; j < G; ++j) {
      include[j] = (j % 3 == 1) ? 0 : 1;
      for (size_t d = 0; d < hd; ++d) rows[j * hd + d] = include[j] ? normal() * float(d + 1) : kNaN;
    }
    std::vector<uint8_t> kg(kivi_key_group_bytes(sh.bits, G, hd));
    kivi_quantize_key_group(rows.data(), hd, include.data(), sh.bits, G, hd, kg.data());
    std::vector<float> back(G * hd);
    for (size_t j = 0; j < G; ++j) kivi_load_key(kg.data(), sh.bits, G, hd, j, back.data() + j * hd);
    for (size_t d = 0; d < hd; ++d) {
      std::vector<float> x, b;
      for (size_t j = 0; j < G; ++j) {
        const unsigned byte = kg[4 * hd + d * nb + j % nb];
        const unsigned code = (byte >> (unsigned(sh.bits) * unsigned(j / nb))) & ((1u << sh.bits) - 1u);
        if (include[j]) {
          x.push_back(rows[j * hd + d]);
          b.push_back(back[j * hd + d]);
        } else {
          EXPECT_EQ(code, 0u) << name << " channel " << d << " token " << j;
          EXPECT_EQ(back[j * hd + d], half(kg.data() + 2 * d));
        }
      }
      check_group(x, b, u16_at(kg.data() + 2 * d), u16_at(kg.data() + 2 * (hd + d)), sh.bits,
                  name + " channel " + std::to_string(d));
    }
    // Nothing included: zero mins, scales and codes.
    std::fill(include.begin(), include.end(), 0);
    kivi_quantize_key_group(rows.data(), hd, include.data(), sh.bits, G, hd, kg.data());
    EXPECT_EQ(kg, std::vector<uint8_t>(kg.size(), 0)) << name;
    // A single included row: constant channels, s = 0.
    include[G / 2] = 1;
    for (size_t d = 0; d < hd; ++d) rows[G / 2 * hd + d] = float(d) - 3.5f;
    kivi_quantize_key_group(rows.data(), hd, include.data(), sh.bits, G, hd, kg.data());
    for (size_t d = 0; d < hd; ++d) {
      EXPECT_EQ(half(kg.data() + 2 * d), float(d) - 3.5f);
      EXPECT_EQ(u16_at(kg.data() + 2 * (hd + d)), 0);
    }
  }
}

// ---- The SIMD kernels ----

// Random key groups / value rows of mixed kinds, quantized by the library.
std::vector<uint8_t> random_key_group(int bits, size_t G, size_t hd) {
  std::vector<float> rows(G * hd);
  for (size_t d = 0; d < hd; ++d) {
    const auto col = values_of_kind(d % 7 == 3 ? 1 : d % 11 == 5 ? 2 : 0, G);
    for (size_t j = 0; j < G; ++j) rows[j * hd + d] = col[j];
  }
  std::vector<uint8_t> kg(kivi_key_group_bytes(bits, G, hd));
  kivi_quantize_key_group(rows.data(), hd, nullptr, bits, G, hd, kg.data());
  return kg;
}
std::vector<uint8_t> random_value_rows(int bits, size_t G, size_t hd, size_t n_rows) {
  const size_t rb = kivi_value_row_bytes(bits, G, hd);
  std::vector<uint8_t> out(n_rows * rb);
  for (size_t j = 0; j < n_rows; ++j) {
    const auto x = values_of_kind(j % 9 == 4 ? 4 : j % 13 == 6 ? 1 : j % 17 == 8 ? 2 : 0, hd);
    kivi_quantize_value_row(x.data(), bits, G, hd, out.data() + j * rb);
  }
  return out;
}
std::vector<float> random_floats(size_t n, float scale = 1.0f) {
  std::vector<float> x(n);
  for (float& v : x) v = normal() * scale;
  return x;
}
// Weights of n_w queries over n_rows rows (ld_w apart): softmax-like positives with whole rows
// of zeros (skipped) and single zeros (not skipped).
std::vector<float> random_weights(size_t n_w, size_t ld_w, size_t n_rows) {
  std::vector<float> w(n_w * ld_w, kNaN);  // padding never read
  for (size_t g = 0; g < n_w; ++g) {
    for (size_t j = 0; j < n_rows; ++j) w[g * ld_w + j] = uniform(0.0f, 1.0f) / float(n_rows);
  }
  for (size_t j = 0; j < n_rows; ++j) {
    if (j % 5 == 2) {
      for (size_t g = 0; g < n_w; ++g) w[g * ld_w + j] = 0.0f;
    } else if (j % 7 == 3) {
      w[(j % n_w) * ld_w + j] = 0.0f;
    }
  }
  return w;
}

bool same_bits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

TEST(Kivi, KeyDotsMatchTheScalarTwinBitForBitOnEveryTarget) {
  const auto shapes = fitting_shapes({4, 6, 8, 16, 32, 48, 64, 128}, {8, 16, 24, 32, 64, 128});
  std::vector<std::vector<uint8_t>> groups;
  for (const Shape& sh : shapes) groups.push_back(random_key_group(sh.bits, sh.group, sh.head_dim));
  testing::for_each_target([&] {
    for (size_t s = 0; s < shapes.size(); ++s) {
      const Shape& sh = shapes[s];
      for (size_t n_q = 1; n_q <= 8; ++n_q) {
        const size_t ld_q = sh.head_dim + 3, ld_out = sh.group + 5;
        const auto q = random_floats(n_q * ld_q);
        std::vector<float> fast(n_q * ld_out, -7.0f), slow(n_q * ld_out, -7.0f);
        kivi_key_group_dots(q.data(), n_q, ld_q, groups[s].data(), sh.bits, sh.group, sh.head_dim, fast.data(), ld_out);
        kivi_key_group_dots_scalar(q.data(), n_q, ld_q, groups[s].data(), sh.bits, sh.group, sh.head_dim, slow.data(),
                                   ld_out);
        for (size_t i = 0; i < fast.size(); ++i) {
          ASSERT_TRUE(same_bits(fast[i], slow[i]))
              << shape_name(sh.bits, sh.group, sh.head_dim) << " n_q " << n_q << " query " << i / ld_out << " token "
              << i % ld_out << ": " << fast[i] << " vs " << slow[i];
          if (i % ld_out >= sh.group) {
            ASSERT_EQ(fast[i], -7.0f) << "wrote outside the outputs";
          }
        }
      }
    }
  });
}

// Query counts up to the prompt blocks' 16 (blocks of four and the rest), row counts up to and
// across the kernel's blocks of 256 rows, every value group layout of the targets.
TEST(Kivi, ValueSumsMatchTheScalarTwinBitForBitOnEveryTarget) {
  const auto shapes = fitting_shapes({4, 6, 8, 16, 32, 48, 64, 128}, {8, 16, 24, 32, 64, 128});
  const size_t row_counts[] = {1, 3, 17, 256, 257};
  std::vector<std::vector<uint8_t>> rows;
  for (const Shape& sh : shapes) rows.push_back(random_value_rows(sh.bits, sh.group, sh.head_dim, 257));
  testing::for_each_target([&] {
    for (size_t s = 0; s < shapes.size(); ++s) {
      const Shape& sh = shapes[s];
      for (size_t n_rows : row_counts) {
        for (size_t n_w : {1u, 2u, 3u, 4u, 5u, 8u, 16u}) {
          const size_t ld_w = n_rows + 3, ld_out = sh.head_dim + 7;
          const auto w = random_weights(n_w, ld_w, n_rows);
          auto fast = random_floats(n_w * ld_out, 0.1f);
          auto slow = fast;
          kivi_values_weighted_sum_group(w.data(), n_w, ld_w, rows[s].data(), sh.bits, sh.group, sh.head_dim, n_rows,
                                         fast.data(), ld_out);
          kivi_values_weighted_sum_group_scalar(w.data(), n_w, ld_w, rows[s].data(), sh.bits, sh.group, sh.head_dim,
                                                n_rows, slow.data(), ld_out);
          for (size_t i = 0; i < fast.size(); ++i) {
            ASSERT_TRUE(same_bits(fast[i], slow[i]))
                << shape_name(sh.bits, sh.group, sh.head_dim) << " rows " << n_rows << " n_w " << n_w << " query "
                << i / ld_out << " channel " << i % ld_out << ": " << fast[i] << " vs " << slow[i];
          }
        }
      }
    }
  });
}

// Min, scale and code of channel c of a value row, read from the bytes as the header lays them out.
struct ValueCode {
  float m, s;
  unsigned q;
};
ValueCode value_code(const uint8_t* row, int bits, size_t G, size_t hd, size_t c) {
  const size_t gv = kivi_value_group(G, hd), nb = gv * size_t(bits) / 8, k = c % gv;
  const uint8_t* group = row + c / gv * (4 + nb);
  const unsigned q = (unsigned(group[4 + k % nb]) >> (unsigned(bits) * unsigned(k / nb))) & ((1u << bits) - 1u);
  return {half(group), half(group + 2), q};
}

// The weighted value sum written out from the header: per query and value group,
// A_c = fma(w * s, q_c, A_c) and M = fma(w, m, M) over the rows with a nonzero weight, from 0,
// then out = out + (A_c + M). kReversed runs the same chains from the last row; kOld is the order
// before (out = out + fma(w * s, q, w * m), row by row): both must differ from the kernels
// somewhere, or the bit-for-bit checks below could not tell the orders apart.
enum class Order { kDocumented, kReversed, kOld };
void value_sum_in_order(Order order, const float* w, size_t n_w, size_t ld_w, const uint8_t* rows, int bits, size_t G,
                        size_t hd, size_t n_rows, float* out, size_t ld_out) {
  const size_t rb = kivi_value_row_bytes(bits, G, hd), gv = kivi_value_group(G, hd);
  std::vector<size_t> listed;
  for (size_t j = 0; j < n_rows; ++j) {
    bool any = false;
    for (size_t g = 0; g < n_w; ++g) any = any || w[g * ld_w + j] != 0.0f;
    if (any) listed.push_back(j);
  }
  if (listed.empty()) return;
  if (order == Order::kReversed) std::reverse(listed.begin(), listed.end());
  for (size_t g = 0; g < n_w; ++g) {
    float* o = out + g * ld_out;
    std::vector<float> a(hd, 0.0f), m(hd / gv, 0.0f);
    for (const size_t j : listed) {
      const float wj = w[g * ld_w + j];
      for (size_t c = 0; c < hd; ++c) {
        const ValueCode vc = value_code(rows + j * rb, bits, G, hd, c);
        const float ws = wj * vc.s;
        if (order == Order::kOld) {
          const float wm = wj * vc.m;
          o[c] = o[c] + std::fma(ws, float(vc.q), wm);
          continue;
        }
        a[c] = std::fma(ws, float(vc.q), a[c]);
        if (c % gv == 0) m[c / gv] = std::fma(wj, vc.m, m[c / gv]);
      }
    }
    if (order == Order::kOld) continue;
    for (size_t c = 0; c < hd; ++c) o[c] = o[c] + (a[c] + m[c / gv]);
  }
}

// The kernel and its twin follow the documented order to the bit, on every target, for query
// counts of decode (1, 4) and prompt blocks (up to 16), across blocks of rows.
TEST(Kivi, ValueSumsFollowTheDocumentedOrder) {
  const auto shapes = fitting_shapes({8, 32, 64, 128}, {8, 32, 64});
  constexpr size_t n_rows = 300;
  std::vector<std::vector<uint8_t>> rows;
  for (const Shape& sh : shapes) rows.push_back(random_value_rows(sh.bits, sh.group, sh.head_dim, n_rows));
  size_t differ_reversed = 0, differ_old = 0, compared = 0;
  testing::for_each_target([&] {
    for (size_t s = 0; s < shapes.size(); ++s) {
      const Shape& sh = shapes[s];
      for (size_t n_w : {1u, 4u, 6u, 16u}) {
        const size_t ld_w = n_rows + 1, ld_out = sh.head_dim + 3;
        const auto w = random_weights(n_w, ld_w, n_rows);
        const auto init = random_floats(n_w * ld_out);
        auto fast = init, slow = init, want = init, reversed = init, old = init;
        kivi_values_weighted_sum_group(w.data(), n_w, ld_w, rows[s].data(), sh.bits, sh.group, sh.head_dim, n_rows,
                                       fast.data(), ld_out);
        kivi_values_weighted_sum_group_scalar(w.data(), n_w, ld_w, rows[s].data(), sh.bits, sh.group, sh.head_dim,
                                              n_rows, slow.data(), ld_out);
        const auto written = [&](Order order, std::vector<float>& out) {
          value_sum_in_order(order, w.data(), n_w, ld_w, rows[s].data(), sh.bits, sh.group, sh.head_dim, n_rows,
                             out.data(), ld_out);
        };
        written(Order::kDocumented, want);
        written(Order::kReversed, reversed);
        written(Order::kOld, old);
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_TRUE(same_bits(fast[i], want[i]) && same_bits(slow[i], want[i]))
              << shape_name(sh.bits, sh.group, sh.head_dim) << " n_w " << n_w << " query " << i / ld_out << " channel "
              << i % ld_out << ": kernel " << fast[i] << ", twin " << slow[i] << ", documented " << want[i];
          ++compared;
          differ_reversed += same_bits(reversed[i], want[i]) ? 0 : 1;
          differ_old += same_bits(old[i], want[i]) ? 0 : 1;
        }
      }
    }
  });
  // The other orders round differently often enough to be caught.
  EXPECT_GT(differ_reversed, compared / 20) << differ_reversed << " of " << compared;
  EXPECT_GT(differ_old, compared / 20) << differ_old << " of " << compared;
}

// Any finite fp16 min and scale (negative scales and subnormals included) and any code bytes:
// the kernels read them exactly as the twins do.
TEST(Kivi, KernelsReadArbitraryBytesAsTheTwins) {
  std::uniform_int_distribution<int> byte(0, 255);
  auto finite_half = [&] {
    uint16_t h = uint16_t(byte(rng()) | byte(rng()) << 8);
    return (h & 0x7C00) == 0x7C00 ? uint16_t(h & ~0x4000) : h;
  };
  const auto shapes = fitting_shapes({8, 32, 64}, {8, 16, 32});
  std::vector<std::vector<uint8_t>> keys, values;
  for (const Shape& sh : shapes) {
    std::vector<uint8_t> kg(kivi_key_group_bytes(sh.bits, sh.group, sh.head_dim));
    for (auto& b : kg) b = uint8_t(byte(rng()));
    for (size_t d = 0; d < 2 * sh.head_dim; ++d) store_u16(kg.data() + 2 * d, finite_half());
    keys.push_back(kg);
    const size_t gv = kivi_value_group(sh.group, sh.head_dim), nb = gv * size_t(sh.bits) / 8, n_rows = 150;
    std::vector<uint8_t> rows(n_rows * kivi_value_row_bytes(sh.bits, sh.group, sh.head_dim));
    for (auto& b : rows) b = uint8_t(byte(rng()));
    for (size_t at = 0; at < rows.size(); at += 4 + nb) {
      store_u16(rows.data() + at, finite_half());
      store_u16(rows.data() + at + 2, finite_half());
    }
    values.push_back(rows);
  }
  testing::for_each_target([&] {
    for (size_t s = 0; s < shapes.size(); ++s) {
      const Shape& sh = shapes[s];
      const size_t n_q = 4, n_rows = 150;
      const auto q = random_floats(n_q * sh.head_dim);
      std::vector<float> fast(n_q * sh.group), slow(n_q * sh.group);
      kivi_key_group_dots(q.data(), n_q, sh.head_dim, keys[s].data(), sh.bits, sh.group, sh.head_dim, fast.data(),
                          sh.group);
      kivi_key_group_dots_scalar(q.data(), n_q, sh.head_dim, keys[s].data(), sh.bits, sh.group, sh.head_dim,
                                 slow.data(), sh.group);
      for (size_t i = 0; i < fast.size(); ++i) {
        ASSERT_TRUE(same_bits(fast[i], slow[i])) << shape_name(sh.bits, sh.group, sh.head_dim) << " key " << i;
      }
      const auto w = random_weights(n_q, n_rows, n_rows);
      std::vector<float> out(n_q * sh.head_dim, 0.0f), out_slow(out);
      kivi_values_weighted_sum_group(w.data(), n_q, n_rows, values[s].data(), sh.bits, sh.group, sh.head_dim, n_rows,
                                     out.data(), sh.head_dim);
      kivi_values_weighted_sum_group_scalar(w.data(), n_q, n_rows, values[s].data(), sh.bits, sh.group, sh.head_dim,
                                            n_rows, out_slow.data(), sh.head_dim);
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_TRUE(same_bits(out[i], out_slow[i])) << shape_name(sh.bits, sh.group, sh.head_dim) << " value " << i;
      }
    }
  });
}

// The kernels compute what decoding first computes, up to float rounding: a sum of n products
// is within (n + 3) * 2^-23 * sum |terms| of the exact one.
TEST(Kivi, KernelsEqualDecodeThenCompute) {
  for (const Shape& sh : fitting_shapes({8, 32, 64, 128}, {8, 32, 64})) {
    const std::string name = shape_name(sh.bits, sh.group, sh.head_dim);
    const size_t G = sh.group, hd = sh.head_dim, n_q = 3;
    const auto kg = random_key_group(sh.bits, G, hd);
    const auto q = random_floats(n_q * hd);
    std::vector<float> dots(n_q * G);
    kivi_key_group_dots(q.data(), n_q, hd, kg.data(), sh.bits, G, hd, dots.data(), G);
    std::vector<float> key(hd);
    for (size_t j = 0; j < G; ++j) {
      kivi_load_key(kg.data(), sh.bits, G, hd, j, key.data());
      for (size_t g = 0; g < n_q; ++g) {
        double exact = 0, terms = 0;
        for (size_t d = 0; d < hd; ++d) {
          const double m = half(kg.data() + 2 * d), s = half(kg.data() + 2 * (hd + d));
          exact += double(q[g * hd + d]) * double(key[d]);
          terms += std::fabs(double(q[g * hd + d])) * (std::fabs(m) + std::fabs(double(key[d]) - m) + s);
        }
        EXPECT_NEAR(dots[g * G + j], exact, double(hd + 3) * 0x1p-23 * terms) << name << " query " << g << " key " << j;
      }
    }
    const size_t n_rows = 300;  // two of the kernel's blocks of rows
    const auto vrows = random_value_rows(sh.bits, G, hd, n_rows);
    const auto w = random_weights(n_q, n_rows, n_rows);
    auto out = random_floats(n_q * hd);
    const auto init = out;
    kivi_values_weighted_sum_group(w.data(), n_q, n_rows, vrows.data(), sh.bits, G, hd, n_rows, out.data(), hd);
    const size_t rb = kivi_value_row_bytes(sh.bits, G, hd);
    std::vector<double> exact(n_q * hd), terms(n_q * hd);
    for (size_t i = 0; i < exact.size(); ++i) {
      exact[i] = init[i];
      terms[i] = std::fabs(init[i]);
    }
    const size_t gv = kivi_value_group(G, hd), nb = gv * size_t(sh.bits) / 8;
    std::vector<float> v(hd);
    for (size_t j = 0; j < n_rows; ++j) {
      const uint8_t* row = vrows.data() + j * rb;
      kivi_load_value_row(row, sh.bits, G, hd, v.data());
      for (size_t g = 0; g < n_q; ++g) {
        for (size_t c = 0; c < hd; ++c) {
          const double wj = w[g * n_rows + j], m = half(row + c / gv * (4 + nb));
          exact[g * hd + c] += wj * double(v[c]);
          terms[g * hd + c] += std::fabs(wj) * (std::fabs(m) + std::fabs(double(v[c]) - m));  // |w m| + |w s code|
        }
      }
    }
    for (size_t i = 0; i < exact.size(); ++i) {
      EXPECT_NEAR(out[i], exact[i], double(n_rows + 3) * 0x1p-23 * terms[i]) << name << " output " << i;
    }
  }
}

// The weighted sum over `mixed` (the n good rows with extra rows interleaved; per query g its
// weights are w_rows[g]) equals the sum over the good rows alone with weights w, to the bit, in the
// SIMD kernel and in its scalar twin.
void expect_extra_rows_add_nothing(const Shape& sh, const std::vector<float>& w, size_t n,
                                   const std::vector<uint8_t>& good, const std::vector<std::vector<float>>& w_rows,
                                   const std::vector<uint8_t>& mixed, size_t total) {
  const size_t G = sh.group, hd = sh.head_dim, n_w = w_rows.size();
  std::vector<float> w_mixed;
  for (size_t g = 0; g < n_w; ++g) w_mixed.insert(w_mixed.end(), w_rows[g].begin(), w_rows[g].end());
  auto want = random_floats(n_w * hd);
  auto got = want, got_scalar = want;
  kivi_values_weighted_sum_group(w.data(), n_w, n, good.data(), sh.bits, G, hd, n, want.data(), hd);
  kivi_values_weighted_sum_group(w_mixed.data(), n_w, total, mixed.data(), sh.bits, G, hd, total, got.data(), hd);
  kivi_values_weighted_sum_group_scalar(w_mixed.data(), n_w, total, mixed.data(), sh.bits, G, hd, total,
                                        got_scalar.data(), hd);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(same_bits(got[i], want[i])) << shape_name(sh.bits, G, hd) << " output " << i;
    ASSERT_TRUE(same_bits(got_scalar[i], want[i])) << shape_name(sh.bits, G, hd) << " output " << i;
  }
}

// Rows whose weights are all zero are skipped: here they hold infinite and NaN mins and scales
// (0 * inf would poison the sums), and the result equals the sum over the other rows, to the bit.
TEST(Kivi, ZeroWeightRowsAreSkipped) {
  testing::for_each_target([] {
    for (const Shape& sh : fitting_shapes({8, 64}, {8, 32})) {
      const size_t G = sh.group, hd = sh.head_dim, rb = kivi_value_row_bytes(sh.bits, G, hd), n = 40, n_w = 4;
      const auto good = random_value_rows(sh.bits, G, hd, n);
      std::vector<uint8_t> mixed;
      const auto w = random_weights(n_w, n, n);
      std::vector<std::vector<float>> w_rows(n_w);
      size_t total = 0;
      for (size_t j = 0; j < n; ++j) {
        if (j % 4 == 1) {  // a poisoned row before row j, weights all zero
          std::vector<uint8_t> bad(rb, 0xFF);
          for (size_t v = 0; v < hd / kivi_value_group(G, hd); ++v) {
            const size_t at = v * (4 + kivi_value_group(G, hd) * size_t(sh.bits) / 8);
            store_u16(bad.data() + at, j % 8 == 1 ? 0x7C00 : 0x7E00);  // inf or NaN min
            store_u16(bad.data() + at + 2, 0x7C00);
          }
          mixed.insert(mixed.end(), bad.begin(), bad.end());
          for (size_t g = 0; g < n_w; ++g) w_rows[g].push_back(0.0f);
          ++total;
        }
        mixed.insert(mixed.end(), good.begin() + long(j * rb), good.begin() + long((j + 1) * rb));
        for (size_t g = 0; g < n_w; ++g) w_rows[g].push_back(w[g * n + j]);
        ++total;
      }
      expect_extra_rows_add_nothing(sh, w, n, good, w_rows, mixed, total);
      // Every row skipped (n_rows 0, or all weights zero): out is not written, -0 and NaN included.
      auto untouched = random_floats(n_w * hd);
      untouched[0] = -0.0f;
      untouched[1] = kNaN;
      const std::vector<float> zero_w(n_w * total, 0.0f);
      for (const size_t rows_used : {size_t{0}, total}) {
        auto fast = untouched, slow = untouched;
        kivi_values_weighted_sum_group(zero_w.data(), n_w, total, mixed.data(), sh.bits, G, hd, rows_used, fast.data(),
                                       hd);
        kivi_values_weighted_sum_group_scalar(zero_w.data(), n_w, total, mixed.data(), sh.bits, G, hd, rows_used,
                                              slow.data(), hd);
        for (size_t i = 0; i < untouched.size(); ++i) {
          ASSERT_TRUE(same_bits(fast[i], untouched[i]) && same_bits(slow[i], untouched[i]))
              << shape_name(sh.bits, G, hd) << " rows " << rows_used << " output " << i;
        }
      }
    }
  });
}

// A value row whose min and scale are 0 (the cache's placeholder for rows it holds elsewhere)
// decodes to zeros whatever its codes, and adds exactly nothing to a weighted sum.
TEST(Kivi, ZeroMinAndScaleRowsContributeNothing) {
  testing::for_each_target([] {
    for (const Shape& sh : fitting_shapes({8, 64, 128}, {8, 32})) {
      const size_t G = sh.group, hd = sh.head_dim, rb = kivi_value_row_bytes(sh.bits, G, hd), n = 200, n_w = 5;
      const size_t gv = kivi_value_group(G, hd), nb = gv * size_t(sh.bits) / 8;
      std::vector<uint8_t> zero_row(rb, 0xFF);  // garbage codes
      for (size_t v = 0; v < hd / gv; ++v) {
        store_u16(zero_row.data() + v * (4 + nb), 0);
        store_u16(zero_row.data() + v * (4 + nb) + 2, 0);
      }
      std::vector<float> decoded(hd, 1.0f);
      kivi_load_value_row(zero_row.data(), sh.bits, G, hd, decoded.data());
      for (float x : decoded) ASSERT_TRUE(same_bits(x, 0.0f));
      const auto good = random_value_rows(sh.bits, G, hd, n);
      const auto w = random_weights(n_w, n, n);
      std::vector<uint8_t> mixed;
      std::vector<std::vector<float>> w_rows(n_w);
      size_t total = 0;
      for (size_t j = 0; j < n; ++j) {
        if (j % 3 == 0) {  // a zero row with nonzero weights
          mixed.insert(mixed.end(), zero_row.begin(), zero_row.end());
          for (size_t g = 0; g < n_w; ++g) w_rows[g].push_back(0.5f + float(g));
          ++total;
        }
        mixed.insert(mixed.end(), good.begin() + long(j * rb), good.begin() + long((j + 1) * rb));
        for (size_t g = 0; g < n_w; ++g) w_rows[g].push_back(w[g * n + j]);
        ++total;
      }
      mixed.insert(mixed.end(), zero_row.begin(), zero_row.end());  // the last row too
      for (size_t g = 0; g < n_w; ++g) w_rows[g].push_back(2.0f);
      ++total;
      expect_extra_rows_add_nothing(sh, w, n, good, w_rows, mixed, total);
      // Only zero rows: the outputs keep their bits.
      std::vector<uint8_t> zeros;
      for (int k = 0; k < 9; ++k) zeros.insert(zeros.end(), zero_row.begin(), zero_row.end());
      const std::vector<float> w_zero(n_w * 9, 0.25f);
      auto kept = random_floats(n_w * hd);
      const auto before = kept;
      kivi_values_weighted_sum_group(w_zero.data(), n_w, 9, zeros.data(), sh.bits, G, hd, 9, kept.data(), hd);
      for (size_t i = 0; i < kept.size(); ++i) ASSERT_TRUE(same_bits(kept[i], before[i]));
    }
  });
}

}  // namespace
}  // namespace squeezekv
