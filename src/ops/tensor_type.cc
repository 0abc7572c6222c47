// The traits table of GGUF tensor types (one row per ggml type id: name, block layout, reference
// codec, file type and matmul kernels) and the entry points that read it. A new computable type is
// a row here plus its kernel file, src/ops/matmul_<type>.cc (docs/architecture.md, "Add a weight
// type").
#include "squeezekv/ops/tensor_type.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ops/quant_formats.h"
#include "ops/weight_kernels.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/base/fp16.h"

namespace squeezekv {

// Each computable type's kernels: the row kernel, its tiles and its repacked layout where it has
// them, defined in its src/ops/matmul_<type>.cc.
extern const detail::WeightKernels f32_kernels, f16_kernels, q4_0_kernels, q4_1_kernels, q5_0_kernels, q8_0_kernels,
    q4_k_kernels, q6_k_kernels, bf16_kernels;

namespace {

using DequantizeFn = void (*)(const uint8_t* src, float* dst, int64_t n);
using QuantizeFn = void (*)(const float* src, uint8_t* dst, int64_t n);

void dequantize_f32(const uint8_t* src, float* dst, int64_t n) {
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void quantize_f32(const float* src, uint8_t* dst, int64_t n) {
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void dequantize_f16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(load_u16(src + 2 * i));
}
void quantize_f16(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_u16(dst + 2 * i, f32_to_fp16(src[i]));
}
void dequantize_bf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(src + 2 * i));
}
void quantize_bf16(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_u16(dst + 2 * i, f32_to_bf16(src[i]));
}

// One ggml type. Rows without functions are types squeezekv only bounds-checks and lists; rows
// with an empty name are ids ggml has retired or never used.
struct TypeTraits {
  uint32_t id;              // GGUF type id (= the row's index)
  std::string_view name;    // ggml's
  BlockLayout layout;       // {0, 0} where the id has no layout
  DequantizeFn dequantize;  // the reference codec; null where squeezekv cannot compute on the type
  QuantizeFn quantize;
  uint32_t file_type;                    // llama_ftype of a file whose matrices are all of this type
  const detail::WeightKernels* kernels;  // matmul's row kernel, tiles and repacked layout
};

// clang-format off
constexpr std::array<TypeTraits, 40> kTraits = {{
    {0, "F32", {1, 4}, dequantize_f32, quantize_f32, 0, &f32_kernels},
    {1, "F16", {1, 2}, dequantize_f16, quantize_f16, 1, &f16_kernels},
    {2, "Q4_0", {quant::q4_0_elems, quant::q4_0_bytes}, quant::dequantize_q4_0, quant::quantize_q4_0, 2, &q4_0_kernels},
    {3, "Q4_1", {quant::q4_1_elems, quant::q4_1_bytes}, quant::dequantize_q4_1, quant::quantize_q4_1, 3, &q4_1_kernels},
    {4, "", {0, 0}, nullptr, nullptr, 0, nullptr},
    {5, "", {0, 0}, nullptr, nullptr, 0, nullptr},
    {6, "Q5_0", {quant::q5_0_elems, quant::q5_0_bytes}, quant::dequantize_q5_0, quant::quantize_q5_0, 8, &q5_0_kernels},
    {7, "Q5_1", {32, 24}, nullptr, nullptr, 0, nullptr},
    {8, "Q8_0", {quant::q8_0_elems, quant::q8_0_bytes}, quant::dequantize_q8_0, quant::quantize_q8_0, 7, &q8_0_kernels},
    {9, "Q8_1", {32, 36}, nullptr, nullptr, 0, nullptr},
    {10, "Q2_K", {256, 84}, nullptr, nullptr, 0, nullptr},
    {11, "Q3_K", {256, 110}, nullptr, nullptr, 0, nullptr},
    {12, "Q4_K", {quant::q4_k_elems, quant::q4_k_bytes}, quant::dequantize_q4_k, quant::quantize_q4_k, 15, &q4_k_kernels},
    {13, "Q5_K", {256, 176}, nullptr, nullptr, 0, nullptr},
    {14, "Q6_K", {quant::q6_k_elems, quant::q6_k_bytes}, quant::dequantize_q6_k, quant::quantize_q6_k, 18, &q6_k_kernels},
    {15, "Q8_K", {256, 292}, nullptr, nullptr, 0, nullptr},
    {16, "IQ2_XXS", {256, 66}, nullptr, nullptr, 0, nullptr},
    {17, "IQ2_XS", {256, 74}, nullptr, nullptr, 0, nullptr},
    {18, "IQ3_XXS", {256, 98}, nullptr, nullptr, 0, nullptr},
    {19, "IQ1_S", {256, 50}, nullptr, nullptr, 0, nullptr},
    {20, "IQ4_NL", {32, 18}, nullptr, nullptr, 0, nullptr},
    {21, "IQ3_S", {256, 110}, nullptr, nullptr, 0, nullptr},
    {22, "IQ2_S", {256, 82}, nullptr, nullptr, 0, nullptr},
    {23, "IQ4_XS", {256, 136}, nullptr, nullptr, 0, nullptr},
    {24, "I8", {1, 1}, nullptr, nullptr, 0, nullptr},
    {25, "I16", {1, 2}, nullptr, nullptr, 0, nullptr},
    {26, "I32", {1, 4}, nullptr, nullptr, 0, nullptr},
    {27, "I64", {1, 8}, nullptr, nullptr, 0, nullptr},
    {28, "F64", {1, 8}, nullptr, nullptr, 0, nullptr},
    {29, "IQ1_M", {256, 56}, nullptr, nullptr, 0, nullptr},
    {30, "BF16", {1, 2}, dequantize_bf16, quantize_bf16, 32, &bf16_kernels},
    {31, "Q4_0_4_4", {0, 0}, nullptr, nullptr, 0, nullptr},  // retired: the repacked Q4_0 layouts
    {32, "Q4_0_4_8", {0, 0}, nullptr, nullptr, 0, nullptr},
    {33, "Q4_0_8_8", {0, 0}, nullptr, nullptr, 0, nullptr},
    {34, "TQ1_0", {256, 54}, nullptr, nullptr, 0, nullptr},
    {35, "TQ2_0", {256, 66}, nullptr, nullptr, 0, nullptr},
    {36, "IQ4_NL_4_4", {0, 0}, nullptr, nullptr, 0, nullptr},  // retired
    {37, "IQ4_NL_4_8", {0, 0}, nullptr, nullptr, 0, nullptr},
    {38, "IQ4_NL_8_8", {0, 0}, nullptr, nullptr, 0, nullptr},
    {39, "MXFP4", {32, 17}, nullptr, nullptr, 0, nullptr},
}};
// clang-format on

// Checked at compile time: ids and layouts. (Whether a row's function pointers are null is not a
// constant expression in position-independent sanitizer builds; tests/ops/quant_test.cc's
// TypeTable and round trips check every computable type's codec instead.)
constexpr bool rows_are_consistent() {
  for (uint32_t i = 0; i < kTraits.size(); ++i) {
    const TypeTraits& t = kTraits[i];
    if (t.id != i) return false;
    if ((t.layout.block_elems == 0) != (t.layout.block_bytes == 0)) return false;
  }
  return true;
}
static_assert(rows_are_consistent(), "each row is its id's, with both sides of its layout or neither");

// The row of a type squeezekv computes on; nullptr otherwise.
const TypeTraits* supported_traits(uint32_t id) {
  if (id >= kTraits.size() || kTraits[id].dequantize == nullptr) return nullptr;
  return &kTraits[id];
}

const TypeTraits& traits(TensorType type) {
  const TypeTraits* t = supported_traits(static_cast<uint32_t>(type));
  if (t == nullptr) {
    throw InvalidArgument(invalid_value("tensor type", static_cast<uint32_t>(type), "is not supported"));
  }
  return *t;
}

void require_whole_blocks(const TypeTraits& t, int64_t n) {
  const int64_t block = t.layout.block_elems;
  if (n < 0 || n % block != 0) {
    throw InvalidArgument(invalid_value(
        "row length", n,
        "must be a non-negative multiple of the " + std::string(t.name) + " block size " + std::to_string(block)));
  }
}

}  // namespace

BlockLayout block_layout(TensorType type) { return traits(type).layout; }

std::span<const TensorType> weight_types() {
  static const std::vector<TensorType> types = [] {
    std::vector<TensorType> computable;
    for (const TypeTraits& t : kTraits) {
      if (supported_traits(t.id) != nullptr) computable.push_back(static_cast<TensorType>(t.id));
    }
    return computable;
  }();
  return types;
}

std::optional<TensorType> tensor_type_by_name(std::string_view name) {
  auto same = [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
  };
  for (const TensorType type : weight_types()) {
    const std::string_view known = kTraits[static_cast<uint32_t>(type)].name;
    if (std::ranges::equal(name, known, same)) return type;
  }
  return std::nullopt;
}

uint32_t llama_file_type(TensorType type) { return traits(type).file_type; }

const detail::WeightKernels& detail::weight_kernels(TensorType type) { return *traits(type).kernels; }

std::optional<BlockLayout> block_layout(uint32_t gguf_type_id) {
  const TypeTraits* t = supported_traits(gguf_type_id);
  if (t == nullptr) return std::nullopt;
  return t->layout;
}

std::optional<BlockLayout> ggml_block_layout(uint32_t gguf_type_id) {
  if (gguf_type_id >= kTraits.size() || kTraits[gguf_type_id].layout.block_elems == 0) return std::nullopt;
  return kTraits[gguf_type_id].layout;
}

std::string_view tensor_type_name(uint32_t gguf_type_id) {
  if (gguf_type_id < kTraits.size() && !kTraits[gguf_type_id].name.empty()) {
    return kTraits[gguf_type_id].name;
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
  const TypeTraits& t = traits(type);
  require_whole_blocks(t, n);
  t.dequantize(static_cast<const uint8_t*>(src), dst, n);
}

void quantize_row(TensorType type, const float* src, void* dst, int64_t n) {
  const TypeTraits& t = traits(type);
  require_whole_blocks(t, n);
  t.quantize(src, static_cast<uint8_t*>(dst), n);
}

}  // namespace squeezekv
