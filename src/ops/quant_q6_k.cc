// Q6_K rows: super-blocks of 256 = 16 sub-blocks of 16 with int8 scales and 6-bit values.
#include <algorithm>
#include <cmath>

#include "squeezekv/base/fp16.h"
#include "ops/quant_formats.h"

namespace squeezekv::quant {

void dequantize_q6_k(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / q6_k_elems; ++b) {
    const uint8_t* block = src + b * q6_k_bytes;
    const float d = fp16_to_f32(load_u16(block + q6_k_d_offset));
    const auto* scales = reinterpret_cast<const int8_t*>(block + q6_k_scales_offset);
    float* y = dst + b * q6_k_elems;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = block + 64 * h;
      const uint8_t* qh = block + q6_k_qh_offset + 32 * h;
      const int8_t* sc = scales + 8 * h;
      float* yh = y + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        const int s = l / 16;
        yh[l] = d * static_cast<float>(sc[s] * q1);
        yh[l + 32] = d * static_cast<float>(sc[s + 2] * q2);
        yh[l + 64] = d * static_cast<float>(sc[s + 4] * q3);
        yh[l + 96] = d * static_cast<float>(sc[s + 6] * q4);
      }
    }
  }
}

// Each sub-block maps its value of largest magnitude to q = -32 (as ggml's Q4_0 does); the int8
// scale magnitudes are rounded up so that this value stays in range.
void quantize_q6_k(const float* src, uint8_t* dst, int64_t n) {
  constexpr int sub_blocks = 16;
  constexpr int sub_elems = 16;
  for (int64_t b = 0; b < n / q6_k_elems; ++b) {
    const float* x = src + b * q6_k_elems;
    uint8_t* block = dst + b * q6_k_bytes;
    float sub_scale[sub_blocks];
    float max_abs_scale = 0.0f;
    for (int s = 0; s < sub_blocks; ++s) {
      float amax = 0.0f, max = 0.0f;
      for (int i = 0; i < sub_elems; ++i) {
        const float v = x[s * sub_elems + i];
        if (std::fabs(v) > amax) {
          amax = std::fabs(v);
          max = v;
        }
      }
      sub_scale[s] = max / -32.0f;
      max_abs_scale = std::max(max_abs_scale, amax / 32.0f);
    }
    const uint16_t d_bits = f32_to_fp16(max_abs_scale / 127.0f);
    const float d = fp16_to_f32(d_bits);
    store_u16(block + q6_k_d_offset, d_bits);

    auto* scales = reinterpret_cast<int8_t*>(block + q6_k_scales_offset);
    uint8_t q[q6_k_elems];
    for (int s = 0; s < sub_blocks; ++s) {
      int sc = 0;
      if (d > 0.0f) {
        const int magnitude = std::min(127, static_cast<int>(std::ceil(std::fabs(sub_scale[s]) / d)));
        sc = sub_scale[s] < 0.0f ? -magnitude : magnitude;
      }
      scales[s] = static_cast<int8_t>(sc);
      const float step = d * static_cast<float>(sc);
      for (int i = 0; i < sub_elems; ++i) {
        const int e = s * sub_elems + i;
        const long level = step != 0.0f ? std::lround(x[e] / step) : 0;
        q[e] = static_cast<uint8_t>(std::clamp(level + 32, 0L, 63L));
      }
    }
    for (int h = 0; h < 2; ++h) {
      uint8_t* ql = block + 64 * h;
      uint8_t* qh = block + q6_k_qh_offset + 32 * h;
      const uint8_t* qq = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((qq[l] & 0xf) | ((qq[l + 64] & 0xf) << 4));
        ql[l + 32] = static_cast<uint8_t>((qq[l + 32] & 0xf) | ((qq[l + 96] & 0xf) << 4));
        qh[l] = static_cast<uint8_t>((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) | ((qq[l + 64] >> 4) << 4) |
                                     ((qq[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace squeezekv::quant
