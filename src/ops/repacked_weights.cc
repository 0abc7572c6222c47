// The repacked Q8_0 layout's sizes and its scalar reader; the SIMD writer and the tiles that read
// it live in matmul_tiles-inl.h (repack_groups and can_repack in matmul.cc, which dispatches).
#include "squeezekv/ops/repacked_weights.h"

#include <limits>
#include <string>

#include "ops/quant_formats.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/base/fp16.h"

namespace squeezekv {
namespace {

constexpr size_t kCodeBytes = 8 * 64;                   // one block's codes for 16 rows
constexpr size_t kHalfBytes = 2 * kRepackedGroupRows;  // one block's scales for 16 rows

}  // namespace

size_t repacked_group_bytes(int64_t n_cols) {
  require(n_cols > 0 && n_cols % quant::q8_0_elems == 0, "n_cols", n_cols, "must be a positive multiple of 32");
  const auto n_blocks = static_cast<size_t>(n_cols / quant::q8_0_elems);
  return (n_blocks * (kCodeBytes + kHalfBytes) + 63) / 64 * 64;
}

size_t repacked_bytes(const WeightMatrix& w) {
  require(w.n_rows > 0, "n_rows", w.n_rows, "must be > 0");
  const auto groups = static_cast<size_t>((w.n_rows + kRepackedGroupRows - 1) / kRepackedGroupRows);
  const size_t group = repacked_group_bytes(w.n_cols);
  require(groups <= std::numeric_limits<size_t>::max() / group, "n_rows", w.n_rows, "is too large to repack");
  return groups * group;
}

RepackedBuffer allocate_repacked(const WeightMatrix& w) {
  require(can_repack(w), "weight type", tensor_type_name(static_cast<uint32_t>(w.type)),
          "cannot be repacked on this CPU (repacking needs Q8_0 and AVX-512 VNNI)");
  const size_t bytes = repacked_bytes(w);  // a multiple of 64, as aligned_alloc asks
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
  require(p != nullptr, "repacked bytes", bytes, "could not be allocated");
  return RepackedBuffer(p);
}

void dequantize_repacked_row(const WeightMatrix& w, int64_t row, float* out) {
  require(w.repacked != nullptr, "repacked", "null", "the matrix is not repacked");
  if (row < 0 || row >= w.n_rows) {  // the message only on failure: this runs once per token
    require(false, "row", row, "out of range [0, " + std::to_string(w.n_rows) + ")");
  }
  const int64_t n_blocks = w.n_cols / quant::q8_0_elems;
  const auto lane = static_cast<size_t>(row % kRepackedGroupRows);
  const auto* group = static_cast<const uint8_t*>(w.repacked) +
                      static_cast<size_t>(row / kRepackedGroupRows) * repacked_group_bytes(w.n_cols);
  const uint8_t* halves = group + static_cast<size_t>(n_blocks) * kCodeBytes;
  for (int64_t j = 0; j < n_blocks; ++j) {
    const float d = fp16_to_f32(load_u16(halves + static_cast<size_t>(j) * kHalfBytes + 2 * lane));
    const uint8_t* codes = group + static_cast<size_t>(j) * kCodeBytes + 4 * lane;
    for (int64_t i = 0; i < quant::q8_0_elems; ++i) {
      const auto q = static_cast<int8_t>(codes[(i / 4) * 64 + i % 4] ^ 0x80);
      out[j * quant::q8_0_elems + i] = d * static_cast<float>(q);
    }
  }
}

}  // namespace squeezekv
