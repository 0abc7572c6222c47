// Scalar block (de)quantizers of the cache's K/V row formats q8_0 and q4_0 (ops/kv_rows.h) for a
// block of B elements (32, or head_dim when smaller). For B = 32 they produce llama.cpp's bytes:
// quantize_row_q8_0_ref (d = amax / 127, q = round(x / d)) and quantize_row_q4_0_ref (d = the
// value of largest magnitude / -8, q = min(15, trunc(x / d + 8.5))). Shared by the SIMD kernels'
// store path and by the scalar twins.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "squeezekv/base/fp16.h"

namespace squeezekv::kvq {

inline float block_scale(const uint8_t* block) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  return fp16_to_f32(h);
}

inline void put_scale(uint8_t* block, float d) {
  const uint16_t h = f32_to_fp16(d);
  std::memcpy(block, &h, 2);
}

inline void quantize_q8_0_block(const float* x, size_t B, uint8_t* block) {
  float amax = 0.0f;
  for (size_t j = 0; j < B; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_scale(block, d);
  // Clamped before the conversion: equal to llama.cpp's in range, defined when 1/d overflows (a
  // subnormal amax), where the fp16 scale is 0 anyway.
  for (size_t j = 0; j < B; ++j) {
    block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(std::round(x[j] * id), -127.0f, 127.0f)));
  }
}

inline void dequantize_q8_0_block(const uint8_t* block, size_t B, float* out) {
  const float d = block_scale(block);
  for (size_t j = 0; j < B; ++j) out[j] = d * float(static_cast<int8_t>(block[2 + j]));
}

inline void quantize_q4_0_block(const float* x, size_t B, uint8_t* block) {
  float amax = 0.0f, max = 0.0f;
  for (size_t j = 0; j < B; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_scale(block, d);
  const size_t half = B / 2;
  for (size_t j = 0; j < half; ++j) {
    // min(15, trunc(v)) as llama.cpp, with v clamped first so that the conversion is defined.
    const auto lo = static_cast<uint8_t>(std::clamp(x[j] * id + 8.5f, 0.0f, 15.0f));
    const auto hi = static_cast<uint8_t>(std::clamp(x[j + half] * id + 8.5f, 0.0f, 15.0f));
    block[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

inline void dequantize_q4_0_block(const uint8_t* block, size_t B, float* out) {
  const float d = block_scale(block);
  const size_t half = B / 2;
  for (size_t j = 0; j < half; ++j) {
    out[j] = d * float(int(block[2 + j] & 15) - 8);
    out[j + half] = d * float(int(block[2 + j] >> 4) - 8);
  }
}

// One row of head_dim elements, block after block.
inline void quantize_row(const float* x, bool q8, size_t dim, size_t B, uint8_t* row) {
  const size_t block_bytes = q8 ? 2 + B : 2 + B / 2;
  for (size_t b = 0; b < dim / B; ++b) {
    if (q8) quantize_q8_0_block(x + b * B, B, row + b * block_bytes);
    else quantize_q4_0_block(x + b * B, B, row + b * block_bytes);
  }
}

inline void dequantize_row(const uint8_t* row, bool q8, size_t dim, size_t B, float* out) {
  const size_t block_bytes = q8 ? 2 + B : 2 + B / 2;
  for (size_t b = 0; b < dim / B; ++b) {
    if (q8) dequantize_q8_0_block(row + b * block_bytes, B, out + b * B);
    else dequantize_q4_0_block(row + b * block_bytes, B, out + b * B);
  }
}

}  // namespace squeezekv::kvq
