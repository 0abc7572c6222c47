// The nibble formats' repacked tiles (Q4_0, Q4_1, Q5_0; layout in nibble_repacked_layout.h): the
// tiles read the matrix itself, 16 rows at a time, splitting the nibbles (and adding Q5_0's fifth
// bits) in registers, so a decode step reads each weight byte once with vpdpbusd over 16 rows
// instead of one row at a time (the row kernel). Calls of more than 16 tokens unpack the 16 rows
// once into the GGUF-row tiles' panel and run those. Every product, and the order the blocks are
// summed in, is the GGUF-row tiles' (matmul_nibbles-inl.h), hence the row kernel's, bit for bit.
// Per-target code with Highway's per-target include guard, as matmul_rows-inl.h.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "ops/matmul_nibbles-inl.h"
#include "ops/matmul_tiles-inl.h"
#include "ops/nibble_repacked_layout.h"

// clang-format off
#if defined(SQUEEZEKV_OPS_MATMUL_NIBBLES_REPACKED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SQUEEZEKV_OPS_MATMUL_NIBBLES_REPACKED_INL_H_
#undef SQUEEZEKV_OPS_MATMUL_NIBBLES_REPACKED_INL_H_
#else
#define SQUEEZEKV_OPS_MATMUL_NIBBLES_REPACKED_INL_H_
#endif
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {

#if SQUEEZEKV_VNNI_TILES
// F: the format (matmul_nibbles-inl.h); Whole: its GGUF-row tiles, whose panel large calls use.
template <class F, class Whole>
struct NibbleRepackedTiles {
  static constexpr repacked::NibbleLayout kLayout{F::kFifthBit, F::kHasMin};
  static constexpr int64_t kUnitCols = 32, kUnitBytes = F::kBlockBytes;
  static constexpr int kMaxTokens = 4;
  // Pieces of whole runs of 8 blocks, as the row kernel sums them.
  static constexpr int64_t kRepackedStreamUnits = 8;

  struct View {
    const __m512i* codes;
    const __m512i* fifth;
    const __m256i* d;
    const __m256i* m;
  };

  static HWY_INLINE SQUEEZEKV_VNNI void repack_to(const uint8_t* rows, size_t stride, int valid, int64_t n_blocks,
                                                  uint8_t* group) {
    size_t offsets[kTileRows], buffer_offsets[kTileRows];
    RowOffsets(stride, valid, offsets);
    for (int r = 0; r < kTileRows; ++r) buffer_offsets[r] = static_cast<size_t>(r) * 32;
    // Each row's 16 nibble bytes in a 32-byte slot: TransposeRows reads 32 bytes a row, past the
    // block (and the matrix) if it read the rows themselves.
    HWY_ALIGN uint8_t buffer[kTileRows][32] = {};
    for (int64_t j = 0; j < n_blocks; ++j) {
      const uint8_t* block = rows + j * F::kBlockBytes;
      for (int r = 0; r < kTileRows; ++r) std::memcpy(buffer[r], block + offsets[r] + F::kCodesOffset, 16);
      __m512i columns[8];
      TransposeRows(buffer[0], buffer_offsets, columns);
      auto* codes = reinterpret_cast<__m512i*>(group + static_cast<size_t>(j) * kLayout.kCodeBytes);
      for (int c = 0; c < 4; ++c) _mm512_store_si512(codes + c, columns[c]);
      HWY_ALIGN uint32_t qh[kTileRows];
      HWY_ALIGN uint16_t d[kTileRows], m[kTileRows];
      for (int r = 0; r < kTileRows; ++r) {
        std::memcpy(&d[r], block + offsets[r], 2);
        if constexpr (F::kHasMin) std::memcpy(&m[r], block + offsets[r] + 2, 2);
        if constexpr (F::kFifthBit) std::memcpy(&qh[r], block + offsets[r] + F::kFifthBitsOffset, 4);
      }
      const auto jj = static_cast<size_t>(j);
      std::memcpy(group + kLayout.d_offset(n_blocks) + jj * kLayout.kHalfBytes, d, sizeof d);
      if constexpr (F::kHasMin) std::memcpy(group + kLayout.m_offset(n_blocks) + jj * kLayout.kHalfBytes, m, sizeof m);
      if constexpr (F::kFifthBit) {
        std::memcpy(group + kLayout.fifth_offset(n_blocks) + jj * kLayout.kFifthBytes, qh, sizeof qh);
      }
    }
  }

  // Block j's 8 column vectors as the GGUF-row panel holds them (vector g: columns 4g..4g+3 of
  // the 16 rows, codes 0..15, or 0..31 with the fifth bits).
  static HWY_INLINE SQUEEZEKV_VNNI void codes(const View& v, int64_t j, __m512i* w) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int c = 0; c < 4; ++c) {
      const __m512i packed = _mm512_load_si512(v.codes + j * 4 + c);
      w[c] = _mm512_and_si512(packed, low4);
      w[c + 4] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low4);
    }
    if constexpr (F::kFifthBit) {
      // Column 4g + i takes bit 4g + i of its row's qh: shift the bits of vector g down to the
      // lowest byte, copy that byte to the dword's 4 bytes, and test bit i in byte i.
      const __m512i qh = _mm512_load_si512(v.fifth + j);
      const __m512i spread = _mm512_set4_epi32(0x0c0c0c0c, 0x08080808, 0x04040404, 0);
      const __m512i bit = _mm512_set1_epi32(0x08040201), sixteen = _mm512_set1_epi8(16);
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        const __m512i bits = _mm512_shuffle_epi8(_mm512_srli_epi32(qh, static_cast<unsigned>(4 * g)), spread);
        w[g] = _mm512_or_si512(w[g], _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(bits, bit), sixteen));
      }
    }
  }

  // A one-token tile asks for the lines kOneTokenAhead bytes on in each of its streams as it
  // reads a block, as Q8_0's does (and so takes a group's blocks as one piece, without the
  // window): with the window alone it waited on its loads at about half the bandwidth probe (one
  // Q4_1 matrix of 2048 columns, one thread, AMD EPYC: 53 % before, 80 % after).
  static constexpr size_t kOneTokenAhead = 4096;
  static HWY_INLINE void AskAhead(const View& v, int64_t j) {
    using Layout = repacked::NibbleLayout;
    constexpr size_t kBlocksAhead = kOneTokenAhead / Layout::kCodeBytes;
    prefetch_block_ahead(v.codes + j * 4, j, Layout::kCodeBytes, kBlocksAhead);
    if constexpr (F::kFifthBit) prefetch_block_ahead(v.fifth + j, j, Layout::kFifthBytes, kBlocksAhead);
    prefetch_block_ahead(v.d + j, j, Layout::kHalfBytes, kBlocksAhead);
    if constexpr (F::kHasMin) prefetch_block_ahead(v.m + j, j, Layout::kHalfBytes, kBlocksAhead);
  }

  // NibbleProducts' products, from the repacked codes.
  template <int T>
  static HWY_INLINE SQUEEZEKV_VNNI void products(const View& v, const TokenQ8* x, int64_t x0, int64_t j, __m512* p) {
    if constexpr (T == 1) AskAhead(v, j);
    __m512i w[8];
    codes(v, j, w);
    __m512i s[T];
    for (int k = 0; k < T; ++k) {
      s[k] = F::kHasMin ? _mm512_setzero_si512()
                        : _mm512_srai_epi32(Broadcast32(x[k].q8_0_offset + x0 + j), F::kOffsetShift);
    }
    const int64_t column = (x0 + j) * 32;
    for (int g = 0; g < 8; ++g) {
      for (int k = 0; k < T; ++k) s[k] = DotBroadcast<T>(s[k], w[g], x[k].q8 + column + 4 * g);
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(v.d + j));
    for (int k = 0; k < T; ++k) {
      p[k] = _mm512_mul_ps(_mm512_cvtepi32_ps(s[k]), _mm512_mul_ps(d, _mm512_set1_ps(x[k].scale[x0 + j])));
    }
  }

  template <int T>
  static HWY_INLINE SQUEEZEKV_VNNI void tile(View v, int64_t n_blocks, const TokenQ8* x, int64_t x0, __m512* a0,
                                             __m512* a1) {
    auto product = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA { products<T>(v, x, x0, j, p); };
    auto minimum = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA {
      const __m512 m = _mm512_cvtph_ps(_mm256_load_si256(v.m + j));
      for (int k = 0; k < T; ++k) p[k] = _mm512_mul_ps(m, _mm512_set1_ps(x[k].scaled_sum[x0 + j]));
    };
    AddBlocksInOrder<T>(product, n_blocks, a0);
    if constexpr (F::kHasMin) AddBlocksInOrder<T>(minimum, n_blocks, a1);
  }

  static HWY_INLINE SQUEEZEKV_VNNI __m512 combine(__m512 a0, __m512 a1) { return Whole::combine(a0, a1); }

  static HWY_INLINE View repacked_view(const uint8_t* group, int64_t n_blocks, int64_t u0, int64_t, Panel&) {
    const auto at = [&](size_t offset) { return group + offset; };
    return View{reinterpret_cast<const __m512i*>(group) + u0 * 4,
                reinterpret_cast<const __m512i*>(at(kLayout.fifth_offset(n_blocks))) + u0,
                reinterpret_cast<const __m256i*>(at(kLayout.d_offset(n_blocks))) + u0,
                reinterpret_cast<const __m256i*>(at(kLayout.m_offset(n_blocks))) + u0};
  }

  using WholeKind = Whole;
  static HWY_INLINE SQUEEZEKV_VNNI typename Whole::View whole_view(const uint8_t* group, int64_t n_blocks,
                                                                   Panel& panel) {
    const View v = repacked_view(group, n_blocks, 0, n_blocks, panel);
    __m512i* bytes = panel.bytes.reserve(static_cast<size_t>(n_blocks) * 8);
    __m512* factor = panel.factor.reserve(static_cast<size_t>(n_blocks));
    __m512* factor_min = F::kHasMin ? panel.factor_min.reserve(static_cast<size_t>(n_blocks)) : nullptr;
    for (int64_t j = 0; j < n_blocks; ++j) {
      codes(v, j, bytes + j * 8);
      factor[j] = _mm512_cvtph_ps(_mm256_load_si256(v.d + j));
      if constexpr (F::kHasMin) factor_min[j] = _mm512_cvtph_ps(_mm256_load_si256(v.m + j));
    }
    return Whole::view(panel);
  }

  static HWY_INLINE void repacked_prefetch(const uint8_t* group, int64_t n_blocks, int64_t u0, int64_t u1) {
    const auto ask = [&](size_t section, size_t unit_bytes) {
      for (size_t b = static_cast<size_t>(u0) * unit_bytes; b < static_cast<size_t>(u1) * unit_bytes; b += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(group + section + b), _MM_HINT_T1);
      }
    };
    ask(0, kLayout.kCodeBytes);
    if constexpr (F::kFifthBit) ask(kLayout.fifth_offset(n_blocks), kLayout.kFifthBytes);
    ask(kLayout.d_offset(n_blocks), kLayout.kHalfBytes);
    if constexpr (F::kHasMin) ask(kLayout.m_offset(n_blocks), kLayout.kHalfBytes);
  }
};
#endif  // SQUEEZEKV_VNNI_TILES

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
