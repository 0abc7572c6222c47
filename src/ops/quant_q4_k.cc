// Q4_K rows: super-blocks of 256 = 8 sub-blocks of 32 with 6-bit scales and mins.
#include <algorithm>
#include <cmath>

#include "squeezekv/base/fp16.h"
#include "ops/quant_formats.h"

namespace squeezekv::quant {

void dequantize_q4_k(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / q4_k_elems; ++b) {
    const uint8_t* block = src + b * q4_k_bytes;
    const float d = fp16_to_f32(load_u16(block));
    const float dmin = fp16_to_f32(load_u16(block + 2));
    const uint8_t* packed = block + q4_k_scales_offset;
    const uint8_t* qs = block + q4_k_qs_offset;
    float* y = dst + b * q4_k_elems;
    uint8_t scale[8], min[8];
    q4_k_unpack_scales(packed, scale, min);
    for (int g = 0; g < 4; ++g) {
      const float d_lo = d * static_cast<float>(scale[2 * g]), m_lo = dmin * static_cast<float>(min[2 * g]);
      const float d_hi = d * static_cast<float>(scale[2 * g + 1]), m_hi = dmin * static_cast<float>(min[2 * g + 1]);
      for (int l = 0; l < 32; ++l) {
        y[64 * g + l] = d_lo * static_cast<float>(qs[32 * g + l] & 0xf) - m_lo;
        y[64 * g + 32 + l] = d_hi * static_cast<float>(qs[32 * g + l] >> 4) - m_hi;
      }
    }
  }
}

// A simple min/max quantiser (not llama.cpp's search): each sub-block takes min(0, min x) as its
// offset and covers up to its max; the 6-bit mins are rounded to nearest and the 6-bit scales
// rounded up, so the range stays covered and the error stays within about half a step.
void quantize_q4_k(const float* src, uint8_t* dst, int64_t n) {
  constexpr int sub_blocks = 8;
  constexpr int sub_elems = 32;
  for (int64_t b = 0; b < n / q4_k_elems; ++b) {
    const float* x = src + b * q4_k_elems;
    uint8_t* block = dst + b * q4_k_bytes;
    float offset[sub_blocks], top[sub_blocks];
    float max_scale = 0.0f, max_offset = 0.0f;
    for (int s = 0; s < sub_blocks; ++s) {
      float lo = 0.0f, hi = 0.0f;
      for (int i = 0; i < sub_elems; ++i) {
        lo = std::min(lo, x[s * sub_elems + i]);
        hi = std::max(hi, x[s * sub_elems + i]);
      }
      offset[s] = -lo;
      top[s] = hi;
      max_scale = std::max(max_scale, (hi - lo) / 15.0f);
      max_offset = std::max(max_offset, -lo);
    }
    const uint16_t d_bits = f32_to_fp16(max_scale / 63.0f);
    const uint16_t dmin_bits = f32_to_fp16(max_offset / 63.0f);
    const float d = fp16_to_f32(d_bits), dmin = fp16_to_f32(dmin_bits);
    store_u16(block, d_bits);
    store_u16(block + 2, dmin_bits);

    int scale[sub_blocks], min[sub_blocks];
    for (int s = 0; s < sub_blocks; ++s) {
      min[s] = dmin > 0.0f ? std::clamp(static_cast<int>(std::lround(offset[s] / dmin)), 0, 63) : 0;
      const float needed = (top[s] + dmin * static_cast<float>(min[s])) / 15.0f;
      scale[s] = d > 0.0f ? std::clamp(static_cast<int>(std::ceil(needed / d)), 0, 63) : 0;
    }
    uint8_t* packed = block + q4_k_scales_offset;
    for (int s = 0; s < 4; ++s) {
      packed[s] = static_cast<uint8_t>(scale[s] | ((scale[s + 4] >> 4) << 6));
      packed[s + 4] = static_cast<uint8_t>(min[s] | ((min[s + 4] >> 4) << 6));
      packed[s + 8] = static_cast<uint8_t>((scale[s + 4] & 0xf) | ((min[s + 4] & 0xf) << 4));
    }

    uint8_t q[q4_k_elems];
    for (int s = 0; s < sub_blocks; ++s) {
      const float step = d * static_cast<float>(scale[s]);
      const float shift = dmin * static_cast<float>(min[s]);
      for (int i = 0; i < sub_elems; ++i) {
        const int e = s * sub_elems + i;
        const long level = step > 0.0f ? std::lround((x[e] + shift) / step) : 0;
        q[e] = static_cast<uint8_t>(std::clamp(level, 0L, 15L));
      }
    }
    uint8_t* qs = block + q4_k_qs_offset;
    for (int g = 0; g < 4; ++g) {
      for (int l = 0; l < 32; ++l) {
        qs[32 * g + l] = static_cast<uint8_t>(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
      }
    }
  }
}

}  // namespace squeezekv::quant
