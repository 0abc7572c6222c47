// The repacked layouts''s sizes and its scalar reader; the SIMD writer and the tiles that read
// it live in matmul_tiles-inl.h (repack_groups and can_repack in matmul.cc, which dispatches).
#include "squeezekv/ops/repacked_weights.h"

#include <cstring>
#include <limits>
#include <string>

#include "ops/quant_formats.h"
#include "ops/repacked_layout.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/base/fp16.h"

namespace squeezekv {
namespace {

using namespace repacked;

// Block j of row `lane` of a Q8_0 group, as GGUF stores it (34 bytes).
void q8_0_block(const uint8_t* group, int64_t n_blocks, int64_t j, size_t lane, uint8_t* block) {
  std::memcpy(block, group + static_cast<size_t>(n_blocks) * kQ8_0CodeBytes + static_cast<size_t>(j) * kQ8_0HalfBytes +
                         2 * lane, 2);
  const uint8_t* codes = group + static_cast<size_t>(j) * kQ8_0CodeBytes + 4 * lane;
  for (size_t i = 0; i < quant::q8_0_elems; ++i) block[2 + i] = codes[(i / 4) * 64 + i % 4] ^ 0x80;
}

// Super-block j of row `lane` of a Q4_K group, as GGUF stores it (144 bytes).
void q4_k_block(const uint8_t* group, int64_t j, size_t lane, uint8_t* block) {
  const uint8_t* unit = group + static_cast<size_t>(j) * kQ4_KUnitBytes;
  std::memcpy(block, unit + kQ4_KHalves + 2 * lane, 2);
  std::memcpy(block + 2, unit + kQ4_KHalves + 32 + 2 * lane, 2);
  for (size_t k = 0; k < 3; ++k) std::memcpy(block + quant::q4_k_scales_offset + 4 * k, unit + kQ4_KWords + k * 64 + 4 * lane, 4);
  for (size_t i = 0; i < 128; ++i) block[quant::q4_k_qs_offset + i] = unit[(i / 4) * 64 + 4 * lane + i % 4];
}

// Super-block j of row `lane` of a Q6_K group, as GGUF stores it (210 bytes).
void q6_k_block(const uint8_t* group, int64_t n_super, int64_t j, size_t lane, uint8_t* block) {
  const uint8_t* unit = group + static_cast<size_t>(j) * kQ6_KUnitBytes;
  for (size_t i = 0; i < 192; ++i) {  // ql then qh: 6 runs of 32 bytes, 8 vectors each
    block[i] = unit[(i / 32 * 8 + i % 32 / 4) * 64 + 4 * lane + i % 4];
  }
  for (size_t k = 0; k < 4; ++k) std::memcpy(block + quant::q6_k_scales_offset + 4 * k, unit + kQ6_KWords + k * 64 + 4 * lane, 4);
  std::memcpy(block + quant::q6_k_d_offset,
              group + static_cast<size_t>(n_super) * kQ6_KUnitBytes + static_cast<size_t>(j) * 32 + 2 * lane, 2);
}

}  // namespace

size_t repacked_group_bytes(TensorType type, int64_t n_cols) {
  require(has_repacked_layout(type), "weight type", tensor_type_name(static_cast<uint32_t>(type)),
          "has no repacked layout (Q8_0, Q4_K and Q6_K have)");
  const int64_t elems = block_layout(type).block_elems;
  if (n_cols <= 0 || n_cols % elems != 0) {
    require(false, "n_cols", n_cols, "must be a positive multiple of " + std::to_string(elems));
  }
  const auto units = static_cast<size_t>(n_cols / elems);
  const size_t unit_bytes = row_bytes(type, elems) * kRepackedGroupRows;
  require(units <= std::numeric_limits<size_t>::max() / 2 / unit_bytes, "n_cols", n_cols, "is too large to repack");
  return (units * unit_bytes + 63) / 64 * 64;
}

size_t repacked_bytes(const WeightMatrix& w) {
  require(w.n_rows > 0, "n_rows", w.n_rows, "must be > 0");
  const auto groups = static_cast<size_t>((w.n_rows + kRepackedGroupRows - 1) / kRepackedGroupRows);
  const size_t group = repacked_group_bytes(w.type, w.n_cols);
  require(groups <= std::numeric_limits<size_t>::max() / group, "n_rows", w.n_rows, "is too large to repack");
  return groups * group;
}

RepackedBuffer allocate_repacked(const WeightMatrix& w) {
  require(can_repack(w), "weight type", tensor_type_name(static_cast<uint32_t>(w.type)),
          "cannot be repacked on this CPU (repacking needs Q8_0, Q4_K or Q6_K and AVX-512 VNNI)");
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
  const int64_t elems = block_layout(w.type).block_elems, n_units = w.n_cols / elems;
  const auto lane = static_cast<size_t>(row % kRepackedGroupRows);
  const auto* group = static_cast<const uint8_t*>(w.repacked) +
                      static_cast<size_t>(row / kRepackedGroupRows) * repacked_group_bytes(w.type, w.n_cols);
  uint8_t block[quant::q6_k_bytes];  // one GGUF block of the row, rebuilt (Q6_K's is the largest)
  for (int64_t j = 0; j < n_units; ++j) {
    if (w.type == TensorType::q8_0) {
      q8_0_block(group, n_units, j, lane, block);
    } else if (w.type == TensorType::q4_k) {
      q4_k_block(group, j, lane, block);
    } else {
      q6_k_block(group, n_units, j, lane, block);
    }
    dequantize_row(w.type, block, out + j * elems, elems);
  }
}

}  // namespace squeezekv
