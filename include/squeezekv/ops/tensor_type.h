// Weight tensor element types, numbered as in GGUF/ggml, and the row (de)quantisation entry points.
// A "row" is ne0 contiguous elements; quantised types store it as whole blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace squeezekv {

enum class TensorType : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q8_0 = 8,
  q4_k = 12,
  q6_k = 14,
  bf16 = 30,
};

// Elements per block and bytes per block (1 and the element size for plain float types).
struct BlockLayout {
  int64_t block_elems;
  int64_t block_bytes;
};

// Layout of a supported type; std::nullopt for a GGUF type id squeezekv cannot compute on.
std::optional<BlockLayout> block_layout(uint32_t gguf_type_id);
BlockLayout block_layout(TensorType type);

// Layout of any type ggml defines, computable or not, so that a file's tensors of other types are
// still bounds-checked and listed; std::nullopt for ids ggml has retired or never used.
std::optional<BlockLayout> ggml_block_layout(uint32_t gguf_type_id);

// "F32", "Q4_K", ...; for unknown ids, ggml's name when known ("Q5_K", "IQ2_XS") or "type <id>".
std::string_view tensor_type_name(uint32_t gguf_type_id);

// Bytes of one row of n elements; n must be a multiple of the block size (callers check it).
size_t row_bytes(TensorType type, int64_t n);

// dst[0..n) = the values the format defines for the row at src.
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);

// Writes the row src[0..n) in the given format (round to nearest; used by the GGUF writer for
// random test models and by activation quantisation).
void quantize_row(TensorType type, const float* src, void* dst, int64_t n);

}  // namespace squeezekv
