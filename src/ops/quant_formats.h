// Byte layouts of ggml's block formats and the scalar (de)quantisers of each, shared by
// tensor_type.cc (row entry points) and matmul.cc (which decodes blocks on the fly).
// Blocks are read through byte offsets, not structs, so any 1-byte-aligned pointer works.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace squeezekv::quant {

// The element of largest magnitude, with its sign (the first of equals), as ggml's symmetric
// reference quantisers pick their scale's anchor.
inline float signed_absmax(const float* x, int64_t n) {
  float amax = 0.0f, max = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] > amax || -x[i] > amax) {
      amax = x[i] < 0.0f ? -x[i] : x[i];
      max = x[i];
    }
  }
  return max;
}

// Q8_0: 32 elements = fp16 d, int8 q[32]; value = d * q.
inline constexpr int64_t q8_0_elems = 32;
inline constexpr int64_t q8_0_bytes = 34;

// Q4_0: 32 elements = fp16 d, 16 bytes; byte j holds element j (low nibble) and element j + 16
// (high nibble); value = d * (q - 8).
inline constexpr int64_t q4_0_elems = 32;
inline constexpr int64_t q4_0_bytes = 18;

// Q4_1: 32 elements = fp16 d, fp16 m, 16 bytes of nibbles laid out as Q4_0's; value = d * q + m.
inline constexpr int64_t q4_1_elems = 32;
inline constexpr int64_t q4_1_bytes = 20;
inline constexpr int64_t q4_1_qs_offset = 4;

// Q5_0: 32 elements = fp16 d, uint32 qh (little-endian; bit j is element j's 5th bit), 16 bytes
// of nibbles laid out as Q4_0's (the low 4 bits); value = d * (q - 16).
inline constexpr int64_t q5_0_elems = 32;
inline constexpr int64_t q5_0_bytes = 22;
inline constexpr int64_t q5_0_qh_offset = 2;
inline constexpr int64_t q5_0_qs_offset = 6;

// Q4_K: 256 elements in 8 sub-blocks of 32 = fp16 d, fp16 dmin, 12 bytes of 6-bit (scale, min)
// pairs, 128 bytes of nibbles; value = d * scale_s * q - dmin * min_s. Nibble bytes come in 4
// groups of 32: group g holds sub-block 2g in its low nibbles and 2g + 1 in its high nibbles.
inline constexpr int64_t q4_k_elems = 256;
inline constexpr int64_t q4_k_bytes = 144;
inline constexpr int64_t q4_k_scales_offset = 4;
inline constexpr int64_t q4_k_qs_offset = 16;

// Q6_K: 256 elements in 16 sub-blocks of 16 = ql[128] (low 4 bits), qh[64] (high 2 bits),
// int8 scales[16], fp16 d; value = d * scale_s * (q - 32). Each half of 128 elements uses 64 ql,
// 32 qh and 8 scales: for l < 32, ql[l] low/high nibbles are elements l and l + 64, ql[l + 32]
// low/high nibbles are l + 32 and l + 96, and qh[l] bits 0-1, 2-3, 4-5, 6-7 extend l, l + 32,
// l + 64, l + 96; sub-block scale index is element / 16.
inline constexpr int64_t q6_k_elems = 256;
inline constexpr int64_t q6_k_bytes = 210;
inline constexpr int64_t q6_k_qh_offset = 128;
inline constexpr int64_t q6_k_scales_offset = 192;
inline constexpr int64_t q6_k_d_offset = 208;

// Unpacks Q4_K's 12 packed bytes into the 8 sub-block scales and mins (ggml's get_scale_min_k4
// for all 8 at once). Bytes 0-3 hold scales 0-3 and bytes 4-7 mins 0-3 in their low 6 bits;
// scales/mins 4-7 keep their low 4 bits in the low/high nibbles of bytes 8-11 and their top 2
// bits in the spare top bits of bytes 0-3 / 4-7. Works on 32-bit words, four sub-blocks at once.
inline void q4_k_unpack_scales(const uint8_t* packed, uint8_t scale[8], uint8_t min[8]) {
  static_assert(std::endian::native == std::endian::little, "GGUF blocks are little-endian");
  uint32_t w[3];
  std::memcpy(w, packed, sizeof w);
  const uint32_t low6 = 0x3f3f3f3fu, low4 = 0x0f0f0f0fu, low2 = 0x03030303u;
  const uint32_t words[4] = {w[0] & low6, (w[2] & low4) | (((w[0] >> 6) & low2) << 4), w[1] & low6,
                             ((w[2] >> 4) & low4) | (((w[1] >> 6) & low2) << 4)};
  std::memcpy(scale, words, 8);  // little-endian bytes: scales 0-3, then 4-7
  std::memcpy(min, words + 2, 8);
}

// Row (de)quantisers; n is a multiple of the block size.
void dequantize_q8_0(const uint8_t* src, float* dst, int64_t n);
void quantize_q8_0(const float* src, uint8_t* dst, int64_t n);
void dequantize_q4_0(const uint8_t* src, float* dst, int64_t n);
void quantize_q4_0(const float* src, uint8_t* dst, int64_t n);
void dequantize_q4_1(const uint8_t* src, float* dst, int64_t n);
void quantize_q4_1(const float* src, uint8_t* dst, int64_t n);
void dequantize_q5_0(const uint8_t* src, float* dst, int64_t n);
void quantize_q5_0(const float* src, uint8_t* dst, int64_t n);
void dequantize_q4_k(const uint8_t* src, float* dst, int64_t n);
void quantize_q4_k(const float* src, uint8_t* dst, int64_t n);
void dequantize_q6_k(const uint8_t* src, float* dst, int64_t n);
void quantize_q6_k(const float* src, uint8_t* dst, int64_t n);

}  // namespace squeezekv::quant
