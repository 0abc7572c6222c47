// Q4_1 rows: 32 4-bit values sharing an fp16 scale d and an fp16 minimum m.
#include <algorithm>

#include "squeezekv/base/fp16.h"
#include "ops/quant_formats.h"

namespace squeezekv::quant {

void dequantize_q4_1(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / q4_1_elems; ++b) {
    const uint8_t* block = src + b * q4_1_bytes;
    const float d = fp16_to_f32(load_u16(block));
    const float m = fp16_to_f32(load_u16(block + 2));
    const uint8_t* qs = block + q4_1_qs_offset;
    float* y = dst + b * q4_1_elems;
    for (int64_t j = 0; j < q4_1_elems / 2; ++j) {
      y[j] = d * static_cast<float>(qs[j] & 0xf) + m;
      y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
    }
  }
}

// As ggml's quantize_row_q4_1_ref: the block's minimum is m, its range spans the 16 codes
// (d = (max - min) / 15), codes round to nearest and are clamped at 15.
void quantize_q4_1(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / q4_1_elems; ++b) {
    const float* x = src + b * q4_1_elems;
    uint8_t* block = dst + b * q4_1_bytes;
    float min = x[0], max = x[0];
    for (int64_t i = 1; i < q4_1_elems; ++i) {
      min = std::min(min, x[i]);
      max = std::max(max, x[i]);
    }
    const float d = (max - min) / 15.0f;
    const float inv_d = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(block, f32_to_fp16(d));
    store_u16(block + 2, f32_to_fp16(min));
    const auto quantize = [&](float v) {
      // (v - min) * inv_d lies in [0, 15], so the truncation below rounds a non-negative value.
      return std::min(15, static_cast<int>((v - min) * inv_d + 0.5f));
    };
    for (int64_t j = 0; j < q4_1_elems / 2; ++j) {
      block[q4_1_qs_offset + j] = static_cast<uint8_t>(quantize(x[j]) | (quantize(x[j + 16]) << 4));
    }
  }
}

}  // namespace squeezekv::quant
