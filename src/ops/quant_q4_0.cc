// Q4_0 rows: 32 4-bit values (offset 8) sharing one fp16 scale.
#include <algorithm>

#include "squeezekv/base/fp16.h"
#include "ops/quant_formats.h"

namespace squeezekv::quant {

void dequantize_q4_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / q4_0_elems; ++b) {
    const uint8_t* block = src + b * q4_0_bytes;
    const float d = fp16_to_f32(load_u16(block));
    const uint8_t* qs = block + 2;
    float* y = dst + b * q4_0_elems;
    for (int64_t j = 0; j < q4_0_elems / 2; ++j) {
      y[j] = d * static_cast<float>((qs[j] & 0xf) - 8);
      y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
    }
  }
}

// As ggml's quantize_row_q4_0_ref: the value of largest magnitude maps exactly to q = 0
// (d = max / -8), the other sign gets one step less range (clamped at 15).
void quantize_q4_0(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / q4_0_elems; ++b) {
    const float* x = src + b * q4_0_elems;
    uint8_t* block = dst + b * q4_0_bytes;
    const float max = signed_absmax(x, q4_0_elems);
    const float d = max / -8.0f;
    const float inv_d = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(block, f32_to_fp16(d));
    const auto quantize = [inv_d](float v) {
      // v * inv_d lies in [-8, 8], so the truncation below is a floor of a non-negative value.
      return std::min(15, static_cast<int>(v * inv_d + 8.5f));
    };
    for (int64_t j = 0; j < q4_0_elems / 2; ++j) {
      block[2 + j] = static_cast<uint8_t>(quantize(x[j]) | (quantize(x[j + 16]) << 4));
    }
  }
}

}  // namespace squeezekv::quant
