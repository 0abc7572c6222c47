// The repacked layout of the nibble formats (Q4_0, Q4_1, Q5_0; repacked_weights.h), per group of
// 16 rows and n 32-column blocks: the codes of every block (4 vectors a block: vector v, lane r =
// row r's nibble bytes 4v..4v+3, two nibbles a byte as GGUF has them), then Q5_0's fifth bits
// (a vector a block, lane r = row r's qh), then every block's 16 fp16 d, then Q4_1's 16 fp16 m:
// 16 times the block's bytes, every section 32-byte aligned. Shared by the SIMD writer and tiles
// (matmul_nibbles_repacked-inl.h) and each format's scalar unit reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ops/repack_by_copies.h"
#include "squeezekv/ops/weight_matrix.h"

namespace squeezekv::repacked {

struct NibbleLayout {
  bool fifth_bits;  // Q5_0's qh (block bytes 2..5, the nibbles after)
  bool minimum;     // Q4_1's m (block bytes 2..3, the nibbles after)

  static constexpr size_t kCodeBytes = 4 * 64, kFifthBytes = 64, kHalfBytes = 32;

  size_t fifth_offset(int64_t n_blocks) const { return static_cast<size_t>(n_blocks) * kCodeBytes; }
  size_t d_offset(int64_t n_blocks) const {
    return fifth_offset(n_blocks) + (fifth_bits ? static_cast<size_t>(n_blocks) * kFifthBytes : 0);
  }
  size_t m_offset(int64_t n_blocks) const { return d_offset(n_blocks) + static_cast<size_t>(n_blocks) * kHalfBytes; }
  // Where a GGUF block keeps its 16 nibble bytes.
  size_t codes_in_block() const { return fifth_bits ? 6 : minimum ? 4 : 2; }
};

// Block j of row `lane` of a repacked group of n_blocks blocks, as GGUF stores it.
inline void read_nibble_unit(NibbleLayout layout, const uint8_t* group, int64_t n_blocks, int64_t j, size_t lane,
                             uint8_t* block) {
  const auto jj = static_cast<size_t>(j);
  std::memcpy(block, group + layout.d_offset(n_blocks) + jj * NibbleLayout::kHalfBytes + 2 * lane, 2);
  if (layout.minimum)
    std::memcpy(block + 2, group + layout.m_offset(n_blocks) + jj * NibbleLayout::kHalfBytes + 2 * lane, 2);
  if (layout.fifth_bits) {
    std::memcpy(block + 2, group + layout.fifth_offset(n_blocks) + jj * NibbleLayout::kFifthBytes + 4 * lane, 4);
  }
  const uint8_t* codes = group + jj * NibbleLayout::kCodeBytes + 4 * lane;
  for (size_t i = 0; i < 16; ++i) block[layout.codes_in_block() + i] = codes[(i / 4) * 64 + i % 4];
}

// Groups [g0, g1) of a nibble-format matrix's layout by plain copies: the bytes
// NibbleRepackedTiles::repack_to writes.
inline void nibble_repack_groups_by_copies(NibbleLayout layout, const WeightMatrix& w, int64_t g0, int64_t g1,
                                           uint8_t* out) {
  const int64_t n_blocks = w.n_cols / 32;
  repack_groups_by_copies(w, g0, g1, out, [&](const uint8_t* block, uint8_t* group, size_t j, size_t lane) {
    for (size_t v = 0; v < 4; ++v) {
      std::memcpy(group + j * NibbleLayout::kCodeBytes + 64 * v + 4 * lane, block + layout.codes_in_block() + 4 * v, 4);
    }
    std::memcpy(group + layout.d_offset(n_blocks) + j * NibbleLayout::kHalfBytes + 2 * lane, block, 2);
    if (layout.minimum) {
      std::memcpy(group + layout.m_offset(n_blocks) + j * NibbleLayout::kHalfBytes + 2 * lane, block + 2, 2);
    }
    if (layout.fifth_bits) {
      std::memcpy(group + layout.fifth_offset(n_blocks) + j * NibbleLayout::kFifthBytes + 4 * lane, block + 2, 4);
    }
  });
}

}  // namespace squeezekv::repacked
