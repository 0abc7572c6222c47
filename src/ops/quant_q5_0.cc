// Q5_0 rows: 32 5-bit values (offset 16) sharing one fp16 scale; the 5th bits live apart in qh.
#include <algorithm>
#include <cstring>

#include "squeezekv/base/fp16.h"
#include "ops/quant_formats.h"

namespace squeezekv::quant {
namespace {

uint32_t load_qh(const uint8_t* block) {
  static_assert(std::endian::native == std::endian::little, "GGUF blocks are little-endian");
  uint32_t qh;
  std::memcpy(&qh, block + q5_0_qh_offset, sizeof qh);
  return qh;
}

}  // namespace

void dequantize_q5_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / q5_0_elems; ++b) {
    const uint8_t* block = src + b * q5_0_bytes;
    const float d = fp16_to_f32(load_u16(block));
    const uint32_t qh = load_qh(block);
    const uint8_t* qs = block + q5_0_qs_offset;
    float* y = dst + b * q5_0_elems;
    for (int j = 0; j < 16; ++j) {
      const auto lo = static_cast<int>((qs[j] & 0xfu) | (((qh >> j) & 1u) << 4));
      const auto hi = static_cast<int>((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
      y[j] = d * static_cast<float>(lo - 16);
      y[j + 16] = d * static_cast<float>(hi - 16);
    }
  }
}

// As ggml's quantize_row_q5_0_ref: the value of largest magnitude maps exactly to q = 0
// (d = max / -16), the other sign gets one step less range (clamped at 31).
void quantize_q5_0(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / q5_0_elems; ++b) {
    const float* x = src + b * q5_0_elems;
    uint8_t* block = dst + b * q5_0_bytes;
    const float max = signed_absmax(x, q5_0_elems);
    const float d = max / -16.0f;
    const float inv_d = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(block, f32_to_fp16(d));
    const auto quantize = [inv_d](float v) {
      // v * inv_d lies in [-16, 16], so the truncation below is a floor of a non-negative value.
      return static_cast<uint32_t>(std::min(31, static_cast<int>(v * inv_d + 16.5f)));
    };
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const uint32_t lo = quantize(x[j]), hi = quantize(x[j + 16]);
      block[q5_0_qs_offset + j] = static_cast<uint8_t>((lo & 0xfu) | ((hi & 0xfu) << 4));
      qh |= ((lo >> 4) << j) | ((hi >> 4) << (j + 16));
    }
    std::memcpy(block + q5_0_qh_offset, &qh, sizeof qh);
  }
}

}  // namespace squeezekv::quant
