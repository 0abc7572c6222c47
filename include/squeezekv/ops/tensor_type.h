// Weight tensor element types, numbered as in GGUF/ggml, and the row (de)quantisation entry points.
// A "row" is ne0 contiguous elements; quantised types store it as whole blocks. Everything here
// reads one traits table (src/ops/tensor_type.cc), one row per ggml type id.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace squeezekv {

// Every id ggml defines is named, so that making one computable needs no new enumerator: whether
// squeezekv computes on a type is its row of the traits table (weight_types()).
enum class TensorType : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  bf16 = 30,
  tq1_0 = 34,
  tq2_0 = 35,
  mxfp4 = 39,
};

// The types squeezekv computes on (reads, writes and multiplies), in id order.
std::span<const TensorType> weight_types();

// The computable type named `name`, ggml's name in either case ("Q4_K", "q4_k"); std::nullopt
// for any other name.
std::optional<TensorType> tensor_type_by_name(std::string_view name);

// GGUF's general.file_type (llama.cpp's llama_ftype) of a file whose matrices are all of a
// computable type: Q4_K gives Q4_K_M's, the mix llama.cpp writes with Q4_K.
uint32_t llama_file_type(TensorType type);

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
