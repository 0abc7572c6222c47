// Q8_0 rows: 32 int8 values sharing one fp16 scale.
#include <cmath>

#include "squeezekv/base/fp16.h"
#include "ops/quant_formats.h"

namespace squeezekv::quant {

void dequantize_q8_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / q8_0_elems; ++b) {
    const uint8_t* block = src + b * q8_0_bytes;
    const float d = fp16_to_f32(load_u16(block));
    const auto* q = reinterpret_cast<const int8_t*>(block + 2);
    for (int64_t i = 0; i < q8_0_elems; ++i) dst[b * q8_0_elems + i] = d * static_cast<float>(q[i]);
  }
}

// As ggml's quantize_row_q8_0_ref: d = amax / 127, q = round(x / d).
void quantize_q8_0(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / q8_0_elems; ++b) {
    const float* x = src + b * q8_0_elems;
    uint8_t* block = dst + b * q8_0_bytes;
    float amax = 0.0f;
    for (int64_t i = 0; i < q8_0_elems; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float inv_d = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(block, f32_to_fp16(d));
    auto* q = reinterpret_cast<int8_t*>(block + 2);
    for (int64_t i = 0; i < q8_0_elems; ++i) q[i] = static_cast<int8_t>(std::round(x[i] * inv_d));
  }
}

}  // namespace squeezekv::quant
