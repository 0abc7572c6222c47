// The codec and row kernels of one per-token K/V format, which its row of kKVFormats
// (squeezekv/ops/kv_format.h) points to. Each format's file (kv_format_<name>.cc) fills one: its
// scalar codec, and SIMD kernels built per target from the shared drivers (kv_float_rows-inl.h for
// one value per element, kv_block_rows-inl.h for blocks of codes) behind HWY_DYNAMIC_DISPATCH.
// The entry points of kv_rows.h pick the row by type: nothing else lists the formats.
#pragma once

#include <cstddef>
#include <cstdint>

#include "squeezekv/ops/kv_format.h"

namespace squeezekv {

struct KVRowKernels {
  // kv_type_unfit: "" when rows of head_dim elements can be stored, else why not.
  const char* (*unfit)(size_t head_dim);
  // store_rows and load_rows with head_dim > 0: n elements in rows of head_dim elements.
  void (*store)(const float* src, void* dst, size_t n, size_t head_dim);
  void (*load)(const void* src, float* dst, size_t n, size_t head_dim);
  // One row decoded by the scalar codec: the scalar twins' decoder, the SIMD load's floats.
  void (*load_row_scalar)(const uint8_t* row, size_t head_dim, float* out);
  // row_dots_group and rows_weighted_sum_group.
  void (*dots_group)(const float* q, size_t n_q, size_t ld_q, const void* rows, size_t n_rows, size_t head_dim,
                     float* out, size_t ld_out);
  void (*weighted_sum_group)(const float* w, size_t n_w, size_t ld_w, const void* rows, size_t n_rows, size_t head_dim,
                             float* out, size_t ld_out);
  // row_dots_rotated with the keys turned back in registers (as query_probs_rotated describes);
  // false where this shape does not fit the kernel (the caller then decodes and turns a tile of
  // rows at a time). nullptr: never (block formats).
  bool (*turned_dots)(const float* q, size_t n_q, size_t ld_q, const void* rows, const int32_t* shifts, size_t n_rows,
                      size_t head_dim, size_t n_rot, bool neox, const float* turns, float* out, size_t ld_out);
};

// In a format file's HWY_ONCE part: a table entry that calls the exported per-target kernel
// FUNC (HWY_EXPORT) for the target chosen at run time.
#define SQUEEZEKV_KV_DISPATCH(FUNC) [](auto... args) { return HWY_DYNAMIC_DISPATCH(FUNC)(args...); }

// kv_type_unfit of a format that stores rows of any length.
inline const char* kv_fits_any_head_dim(size_t /*head_dim*/) { return ""; }

// kv_type_unfit of a block format of 32-element blocks: head_dim below 32 (one block a row) or a
// multiple of 32.
template <KVType kType>
const char* kv_blocks_unfit(size_t head_dim) {
  static_assert(kv_format(kType).block == 32, "the message says 32");
  if (head_dim >= 32 && head_dim % 32 != 0) return "block formats need head_dim < 32 or a multiple of 32";
  return "";
}

// store_rows and the scalar row decoder of a block format from its scalar block codec: each row
// of head_dim elements block after block.
template <KVType kType, void (*quantize_block)(const float* x, size_t B, uint8_t* block)>
void kv_store_blocks(const float* src, void* dst, size_t n, size_t head_dim) {
  const size_t B = kv_block_size(kType, head_dim), rb = kv_row_bytes(kType, head_dim);
  const size_t block_bytes = kv_block_bytes(kType, head_dim);
  for (size_t r = 0; r < n / head_dim; ++r) {
    uint8_t* row = static_cast<uint8_t*>(dst) + r * rb;
    for (size_t b = 0; b < head_dim / B; ++b) quantize_block(src + r * head_dim + b * B, B, row + b * block_bytes);
  }
}
template <KVType kType, void (*dequantize_block)(const uint8_t* block, size_t B, float* out)>
void kv_load_row_blocks(const uint8_t* row, size_t head_dim, float* out) {
  const size_t B = kv_block_size(kType, head_dim), block_bytes = kv_block_bytes(kType, head_dim);
  for (size_t b = 0; b < head_dim / B; ++b) dequantize_block(row + b * block_bytes, B, out + b * B);
}

[[noreturn]] void throw_no_row_format(KVType type);

// The kernels of a per-token format; throws InvalidArgument for a grouped one (KIVI), which only
// HeadStore reads.
inline const KVRowKernels& kv_row_kernels(KVType type) {
  const KVRowKernels* kernels = kv_format(type).kernels;
  if (kernels == nullptr) [[unlikely]]
    throw_no_row_format(type);
  return *kernels;
}

}  // namespace squeezekv
