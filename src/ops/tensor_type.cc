// Type table of GGUF tensor types and the row (de)quantisation entry points.
#include "squeezekv/ops/tensor_type.h"

#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "squeezekv/base/fp16.h"
#include "ops/quant_formats.h"
#include "squeezekv/base/errors.h"

namespace squeezekv {
namespace {

// ggml's type names, indexed by GGUF type id; empty where ggml never assigned the id.
constexpr std::array<std::string_view, 40> type_names = {
    "F32",      "F16",      "Q4_0",    "Q4_1",  "",           "",           "Q5_0",       "Q5_1",
    "Q8_0",     "Q8_1",     "Q2_K",    "Q3_K",  "Q4_K",       "Q5_K",       "Q6_K",       "Q8_K",
    "IQ2_XXS",  "IQ2_XS",   "IQ3_XXS", "IQ1_S", "IQ4_NL",     "IQ3_S",      "IQ2_S",      "IQ4_XS",
    "I8",       "I16",      "I32",     "I64",   "F64",        "IQ1_M",      "BF16",       "Q4_0_4_4",
    "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",   "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4",
};

bool is_supported(uint32_t id) {
  switch (static_cast<TensorType>(id)) {
    case TensorType::f32:
    case TensorType::f16:
    case TensorType::q4_0:
    case TensorType::q4_1:
    case TensorType::q8_0:
    case TensorType::q4_k:
    case TensorType::q6_k:
    case TensorType::bf16:
      return true;
  }
  return false;
}

void require_whole_blocks(TensorType type, int64_t n) {
  const int64_t block = block_layout(type).block_elems;
  if (n < 0 || n % block != 0) {
    throw InvalidArgument(invalid_value("row length", n,
                                        "must be a non-negative multiple of the " +
                                            std::string(tensor_type_name(static_cast<uint32_t>(type))) +
                                            " block size " + std::to_string(block)));
  }
}

}  // namespace

BlockLayout block_layout(TensorType type) {
  switch (type) {
    case TensorType::f32:
      return {1, 4};
    case TensorType::f16:
      return {1, 2};
    case TensorType::bf16:
      return {1, 2};
    case TensorType::q4_0:
      return {quant::q4_0_elems, quant::q4_0_bytes};
    case TensorType::q4_1:
      return {quant::q4_1_elems, quant::q4_1_bytes};
    case TensorType::q8_0:
      return {quant::q8_0_elems, quant::q8_0_bytes};
    case TensorType::q4_k:
      return {quant::q4_k_elems, quant::q4_k_bytes};
    case TensorType::q6_k:
      return {quant::q6_k_elems, quant::q6_k_bytes};
  }
  throw InvalidArgument(invalid_value("tensor type", static_cast<uint32_t>(type), "is not supported"));
}

std::optional<BlockLayout> block_layout(uint32_t gguf_type_id) {
  if (!is_supported(gguf_type_id)) return std::nullopt;
  return block_layout(static_cast<TensorType>(gguf_type_id));
}

std::string_view tensor_type_name(uint32_t gguf_type_id) {
  if (gguf_type_id < type_names.size() && !type_names[gguf_type_id].empty()) {
    return type_names[gguf_type_id];
  }
  // Unknown ids: each name is built once and kept (map nodes never move), so views stay valid.
  static std::mutex mutex;
  static std::map<uint32_t, std::string> unknown_names;
  const std::lock_guard lock(mutex);
  auto [it, inserted] = unknown_names.try_emplace(gguf_type_id);
  if (inserted) it->second = "type " + std::to_string(gguf_type_id);
  return it->second;
}

size_t row_bytes(TensorType type, int64_t n) {
  const BlockLayout layout = block_layout(type);
  return static_cast<size_t>(n / layout.block_elems * layout.block_bytes);
}

void dequantize_row(TensorType type, const void* src, float* dst, int64_t n) {
  require_whole_blocks(type, n);
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (type) {
    case TensorType::f32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case TensorType::f16:
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(load_u16(bytes + 2 * i));
      return;
    case TensorType::bf16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(bytes + 2 * i));
      return;
    case TensorType::q4_0:
      return quant::dequantize_q4_0(bytes, dst, n);
    case TensorType::q4_1:
      return quant::dequantize_q4_1(bytes, dst, n);
    case TensorType::q8_0:
      return quant::dequantize_q8_0(bytes, dst, n);
    case TensorType::q4_k:
      return quant::dequantize_q4_k(bytes, dst, n);
    case TensorType::q6_k:
      return quant::dequantize_q6_k(bytes, dst, n);
  }
}

void quantize_row(TensorType type, const float* src, void* dst, int64_t n) {
  require_whole_blocks(type, n);
  auto* bytes = static_cast<uint8_t*>(dst);
  switch (type) {
    case TensorType::f32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case TensorType::f16:
      for (int64_t i = 0; i < n; ++i) store_u16(bytes + 2 * i, f32_to_fp16(src[i]));
      return;
    case TensorType::bf16:
      for (int64_t i = 0; i < n; ++i) store_u16(bytes + 2 * i, f32_to_bf16(src[i]));
      return;
    case TensorType::q4_0:
      return quant::quantize_q4_0(src, bytes, n);
    case TensorType::q4_1:
      return quant::quantize_q4_1(src, bytes, n);
    case TensorType::q8_0:
      return quant::quantize_q8_0(src, bytes, n);
    case TensorType::q4_k:
      return quant::quantize_q4_k(src, bytes, n);
    case TensorType::q6_k:
      return quant::quantize_q6_k(src, bytes, n);
  }
}

}  // namespace squeezekv
