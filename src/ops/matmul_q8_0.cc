// Q8_0 weights (32 int8 codes and an fp16 d a block; value = d * q): the row kernel (int16 lanes
// everywhere, bytes on x86), the prompt tiles and the repacked layout (repacked_weights.h).
// Compiled once per SIMD target (foreach_target); the driver (matmul.cc) reaches MatmulRowsQ8_0
// through the traits table (tensor_type.cc).
// clang-format off: the target include must come first, then foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul_q8_0.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ops/activation_q8.h"
#include "ops/matmul_half_tiles-inl.h"
#include "ops/matmul_rows-inl.h"
#include "ops/matmul_tiles-inl.h"
#include "ops/quant_formats.h"
#include "ops/repack_by_copies.h"
#include "ops/stream_prefetch.h"
#include "ops/weight_kernels.h"
#include "squeezekv/ops/repacked_weights.h"
#include "squeezekv/ops/weight_matrix.h"

#ifndef SQUEEZEKV_OPS_MATMUL_Q8_0_ONCE_
#define SQUEEZEKV_OPS_MATMUL_Q8_0_ONCE_
namespace squeezekv::repacked {
// Q8_0, per 16 rows: each block's codes (8 vectors); the fp16 d of all blocks after the last.
inline constexpr size_t kQ8_0CodeBytes = 8 * 64, kQ8_0HalfBytes = 32;

// Groups [g0, g1) of w's layout by plain copies: the bytes Q8_0Tiles::pack_to writes (codes as
// w + 128).
inline void q8_0_repack_groups_by_copies(const WeightMatrix& w, int64_t g0, int64_t g1, uint8_t* out) {
  const auto n_blocks = static_cast<size_t>(w.n_cols / quant::q8_0_elems);
  repack_groups_by_copies(w, g0, g1, out, [&](const uint8_t* block, uint8_t* group, size_t j, size_t lane) {
    for (size_t i = 0; i < quant::q8_0_elems; ++i) {
      group[j * kQ8_0CodeBytes + (i / 4) * 64 + 4 * lane + i % 4] = block[2 + i] ^ 0x80;
    }
    std::memcpy(group + n_blocks * kQ8_0CodeBytes + j * kQ8_0HalfBytes + 2 * lane, block, 2);
  });
}
}  // namespace squeezekv::repacked
#endif

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Q8_0 rows dotted with K tokens on int16 lanes (every target; the x86 ones use the byte path in
// DotQ8_0Tokens): each weight block is loaded and widened once and used K times. Per-token
// arithmetic does not depend on K.
template <int K>
HWY_INLINE void DotQ8_0Wide(const uint8_t* row, const TokenQ8* x, int64_t n, float* out) {
  const D16 d16;
  const D32 d32;
  const DW dw;
  const size_t lanes = hn::Lanes(d16);
  hn::Vec<DW> acc[K];
  for (int k = 0; k < K; ++k) acc[k] = hn::Zero(dw);
  for (int64_t b = 0; b < n / quant::q8_0_elems; ++b) {
    const uint8_t* block = row + b * quant::q8_0_bytes;
    const auto* qw = reinterpret_cast<const int8_t*>(block + 2);
    const float d = LoadHalf(block);
    hn::Vec<D32> sum0[K], sum1[K];
    for (int k = 0; k < K; ++k) sum0[k] = sum1[k] = hn::Zero(d32);
    for (size_t j = 0; j < 32; j += lanes) {
      const auto w = hn::PromoteTo(d16, hn::LoadU(DI8(), qw + j));
      for (int k = 0; k < K; ++k) {
        sum0[k] = hn::ReorderWidenMulAccumulate(d32, w, hn::LoadU(d16, x[k].q + b * 32 + j), sum0[k], sum1[k]);
      }
    }
    for (int k = 0; k < K; ++k) {
      const auto dot = hn::ConvertTo(dw, hn::RearrangeToOddPlusEven(sum0[k], sum1[k]));
      acc[k] = hn::MulAdd(dot, hn::Set(dw, d * x[k].scale[b]), acc[k]);
    }
  }
  for (int k = 0; k < K; ++k) out[k] = Sum(acc[k]);
}

// Q8_0 rows dotted with K tokens (K = 1 or 4); per-token arithmetic does not depend on K.
template <int K>
HWY_INLINE void DotQ8_0Tokens(const uint8_t* row, const TokenQ8* x, int64_t n, float* out) {
#if SQUEEZEKV_X86_BYTE_DOT
  // x86: vpmaddubsw multiplies unsigned by signed bytes, so |w| meets x with w's sign moved onto
  // it (vpsignb, which also zeroes x where w is 0); pairs stay below 2 * 128 * 127. Each run of 8
  // blocks is reduced together as in DotQ4_K: one conversion per token, against the 8 blocks' d
  // (converted in one instruction) times the token's 8 block scales, then AccumulateInOrder.
  const DS ds;
  const hn::Rebind<hwy::float16_t, DS> dh;
  float acc[K][2] = {};
  const int64_t n_blocks = n / quant::q8_0_elems;
  int64_t b = 0;
  for (; b + 8 <= n_blocks; b += 8) {
    HWY_ALIGN uint16_t d_bits[8];
    __m256i w[8];
    for (int i = 0; i < 8; ++i) {
      const uint8_t* block = row + (b + i) * quant::q8_0_bytes;
      std::memcpy(&d_bits[i], block, 2);
      w[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
    }
    prefetch_ahead(row + b * quant::q8_0_bytes, 8 * quant::q8_0_bytes);
    const auto d = hn::PromoteTo(ds, hn::Load(dh, reinterpret_cast<const hwy::float16_t*>(d_bits)));
    for (int k = 0; k < K; ++k) {
      const int8_t* xk = x[k].q8 + b * quant::q8_0_elems;
      __m256i dots[8];
      for (int i = 0; i < 8; ++i) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xk + 32 * i));
        dots[i] = SignedByteDot(w[i], xv);
      }
      const auto sums = hn::Vec<DS>{_mm256_cvtepi32_ps(SumEachOf8(dots))};
      AccumulateInOrder(sums, hn::Mul(d, hn::LoadU(ds, x[k].scale + b)), acc[k]);
    }
  }
  for (; b < n_blocks; ++b) {  // the last n_blocks % 8 blocks, one at a time
    const uint8_t* block = row + b * quant::q8_0_bytes;
    const __m256i wb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
    const float d = LoadHalf(block);
    for (int k = 0; k < K; ++k) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k].q8 + b * quant::q8_0_elems));
      const __m256i dot = SignedByteDot(wb, xv);
      const auto sum = hn::GetLane(hn::SumOfLanes(DSI32(), hn::Vec<DSI32>{dot}));
      acc[k][b & 1] = Fma1(static_cast<float>(sum), d * x[k].scale[b], acc[k][b & 1]);
    }
  }
  for (int k = 0; k < K; ++k) out[k] = acc[k][0] + acc[k][1];
#else
  DotQ8_0Wide<K>(row, x, n, out);
#endif
}

#if SQUEEZEKV_X86_BYTE_DOT
// The half-group tiles over the repacked layout (matmul_half_tiles-inl.h): the codes come back
// signed (u ^ 0x80), |w| meets x with w's sign moved onto it as in the row kernel (pairs below
// 2 * 128 * 127, so each product is widened at once), and each block's float(dot) * (d * the
// token's block scale) is fused into the chain of its parity in block order, the two chains added
// at the end: DotQ8_0Tokens' order, lane by lane, so its bits.
struct Q8_0HalfTiles {
  static constexpr int64_t kUnitCols = quant::q8_0_elems;

  // The dots of H halves' rows (from half h0 on) with T tokens over n_blocks blocks from a group:
  // out[i * T + k] lane r = row r of half h0 + i with token k.
  template <int T, int H>
  static HWY_INLINE void Tile(const uint8_t* group, int64_t n_blocks, size_t h0, const TokenQ8* x, __m256* out) {
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
    const uint8_t* halves = group + n_blocks * repacked::kQ8_0CodeBytes;
    __m256 acc[H][T][2];
    for (int i = 0; i < H; ++i) {
      for (int k = 0; k < T; ++k) acc[i][k][0] = acc[i][k][1] = _mm256_setzero_ps();
    }
    for (int64_t j = 0; j < n_blocks; ++j) {
      const uint8_t* codes = group + j * repacked::kQ8_0CodeBytes;
      if constexpr (T == 1) prefetch_ahead(codes, repacked::kQ8_0CodeBytes, half_tiles::kOneTokenAheadBytes);
      __m256i dot[H][T];
      for (int v = 0; v < 8; ++v) {
        __m256i w[H], magnitude[H];
        for (int i = 0; i < H; ++i) {
          w[i] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * v + 32 * (h0 + i))),
                                  flip);
          magnitude[i] = _mm256_abs_epi8(w[i]);
        }
        for (int k = 0; k < T; ++k) {
          const __m256i xv = half_tiles::Broadcast4(x[k].q8 + j * 32 + 4 * v);
          for (int i = 0; i < H; ++i) {
            const __m256i d = ByteDot(magnitude[i], _mm256_sign_epi8(xv, w[i]));
            dot[i][k] = v == 0 ? d : _mm256_add_epi32(dot[i][k], d);
          }
        }
      }
      for (int i = 0; i < H; ++i) {
        const __m256 d = _mm256_cvtph_ps(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(halves + j * repacked::kQ8_0HalfBytes + 16 * (h0 + i))));
        for (int k = 0; k < T; ++k) {
          __m256& chain = acc[i][k][j & 1];
          chain =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[i][k]), _mm256_mul_ps(d, _mm256_set1_ps(x[k].scale[j])), chain);
        }
      }
    }
    for (int i = 0; i < H; ++i) {
      for (int k = 0; k < T; ++k) out[i * T + k] = _mm256_add_ps(acc[i][k][0], acc[i][k][1]);
    }
  }
};
#endif

#if SQUEEZEKV_VNNI_TILES
struct Q8_0Tiles {
  static constexpr int64_t kUnitCols = quant::q8_0_elems, kUnitBytes = quant::q8_0_bytes, kStreamUnits = 8;
  static constexpr int kMaxTokens = 8;

  // Q8_0 weights are signed; the panel holds w + 128 (unsigned, for vpdpbusd's unsigned side) and
  // the tiles subtract 128 * (sum of the token's block) to undo it, exactly, in integers. pack_to
  // writes a repacked matrix's group too (repacked_weights.h).
  static HWY_INLINE SQUEEZEKV_VNNI void pack_to(const uint8_t* rows, size_t stride, int valid, int64_t n_blocks,
                                                __m512i* bytes, __m256i* halves) {
    size_t offsets[kTileRows];
    RowOffsets(stride, valid, offsets);
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int64_t j = 0; j < n_blocks; ++j) {
      const uint8_t* block = rows + j * quant::q8_0_bytes;
      __m512i* out = bytes + j * 8;
      TransposeRows(block + 2, offsets, out);
      for (int g = 0; g < 8; ++g) out[g] = _mm512_xor_si512(out[g], flip);
      HWY_ALIGN uint16_t d[kTileRows];
      for (int r = 0; r < kTileRows; ++r) std::memcpy(&d[r], block + offsets[r], 2);
      halves[j] = _mm256_load_si256(reinterpret_cast<const __m256i*>(d));
    }
  }

  static HWY_INLINE SQUEEZEKV_VNNI void pack(const uint8_t* rows, size_t stride, int valid, int64_t n_blocks,
                                             Panel& panel) {
    pack_to(rows, stride, valid, n_blocks, panel.bytes.reserve(static_cast<size_t>(n_blocks) * 8),
            panel.halves.reserve(static_cast<size_t>(n_blocks)));
  }

  // What a tile reads: a panel's, or a repacked matrix's group's, codes and scales.
  struct View {
    const __m512i* bytes;
    const __m256i* halves;
    View offset(int64_t blocks) const { return {bytes + blocks * 8, halves + blocks}; }
  };
  static View view(const Panel& panel) { return {panel.bytes.data(), panel.halves.data()}; }

  // Repacked (repacked_weights.h): per 16 rows, every block's codes as pack_to writes them, then
  // every block's fp16 d; a call's views point straight into it.
  static constexpr int64_t kRepackedStreamUnits = 4;
  static HWY_INLINE SQUEEZEKV_VNNI void repack_to(const uint8_t* rows, size_t stride, int valid, int64_t n_blocks,
                                                  uint8_t* group) {
    pack_to(rows, stride, valid, n_blocks, reinterpret_cast<__m512i*>(group),
            reinterpret_cast<__m256i*>(group + n_blocks * repacked::kQ8_0CodeBytes));
  }
  static HWY_INLINE View repacked_view(const uint8_t* group, int64_t n_blocks, int64_t u0, int64_t, Panel&) {
    return View{reinterpret_cast<const __m512i*>(group),
                reinterpret_cast<const __m256i*>(group + n_blocks * repacked::kQ8_0CodeBytes)}
        .offset(u0);
  }
  using WholeKind = Q8_0Tiles;
  static HWY_INLINE View whole_view(const uint8_t* group, int64_t n_blocks, Panel& panel) {
    return repacked_view(group, n_blocks, 0, n_blocks, panel);
  }
  static HWY_INLINE void repacked_prefetch(const uint8_t* group, int64_t n_blocks, int64_t u0, int64_t u1) {
    constexpr int64_t kCode = repacked::kQ8_0CodeBytes, kHalf = repacked::kQ8_0HalfBytes;
    for (int64_t b = u0 * kCode; b < u1 * kCode; b += 64)
      _mm_prefetch(reinterpret_cast<const char*>(group) + b, _MM_HINT_T1);
    const auto* halves = reinterpret_cast<const char*>(group + n_blocks * kCode);
    for (int64_t b = u0 * kHalf; b < u1 * kHalf; b += 64) _mm_prefetch(halves + b, _MM_HINT_T1);
  }

  // A one-token tile is bound by memory: it asks for the lines of the block kOneTokenAhead bytes
  // on in the same stream (the next 16 rows' codes once past this group's), one line beside each
  // product, and for its fp16 d (2 blocks a line) as many blocks ahead. The window's way, a
  // piece's 34 lines at once at the piece's start, left it at 86-89 % of the bandwidth probe on
  // an AMD EPYC: a burst of prefetches stalls the products behind it. Declaring kOneTokenAhead
  // makes one-token calls run each group's blocks in one tile, without pieces or the window
  // (RepackedKindRows).
  static constexpr size_t kOneTokenAhead = 4096;
  static HWY_INLINE void AskAhead(const __m512i* codes, const __m256i* half, int64_t j) {
    constexpr size_t kBlocksAhead = kOneTokenAhead / repacked::kQ8_0CodeBytes;
    prefetch_block_ahead(codes, j, repacked::kQ8_0CodeBytes, kBlocksAhead);
    prefetch_block_ahead(half, j, repacked::kQ8_0HalfBytes, kBlocksAhead);
  }

  // Q8_0: block j fused into a[j % 2], as the row kernel (AccumulateInOrder); panels of an even
  // number of blocks keep the parity.
  template <int T>
  static HWY_INLINE SQUEEZEKV_VNNI void tile(View panel, int64_t n_blocks, const TokenQ8* x, int64_t x0, __m512* a0,
                                             __m512* a1) {
    const auto* const bytes_ptr = panel.bytes;
    const auto* const halves_ptr = panel.halves;
    auto block = [&](int64_t j, __m512* acc) SQUEEZEKV_VNNI_LAMBDA {
      __m512i s[T];
      for (int k = 0; k < T; ++k) s[k] = Broadcast32(x[k].q8_0_offset + x0 + j);
      if constexpr (T == 1) AskAhead(bytes_ptr + j * 8, halves_ptr + j, j);
      BlockDots<T>(bytes_ptr + j * 8, x, (x0 + j) * quant::q8_0_elems, s);
      const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(halves_ptr + j));
      for (int k = 0; k < T; ++k) {
        acc[k] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[k]), _mm512_mul_ps(d, _mm512_set1_ps(x[k].scale[x0 + j])), acc[k]);
      }
    };
    int64_t j = 0;
    for (; j + 2 <= n_blocks; j += 2) {
      block(j, a0);
      block(j + 1, a1);
    }
    if (j < n_blocks) block(j, a0);
  }

  static HWY_INLINE SQUEEZEKV_VNNI __m512 combine(__m512 a0, __m512 a1) { return _mm512_add_ps(a0, a1); }
};
static_assert(Q8_0Tiles::kStreamUnits % 2 == 0 && Q8_0Tiles::kRepackedStreamUnits % 2 == 0,
              "streamed Q8_0 pieces must keep the row kernels' order");
#endif  // SQUEEZEKV_VNNI_TILES

struct Q8_0Rows {
  template <int K>
  static HWY_INLINE void Dots(const uint8_t* row, const TokenQ8* x, int64_t n, float* out) {
    DotQ8_0Tokens<K>(row, x, n, out);
  }
};

// Rows [row_begin, row_end) of w times every token of the call.
void MatmulRowsQ8_0(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end,
                    float* HWY_RESTRICT y) {
#if SQUEEZEKV_VNNI_TILES
  if (w.repacked != nullptr && HasVnni()) return RepackedRows<Q8_0Tiles>(w, in, row_begin, row_end, y);
  if (UseTiles(in.n_tok, kTileMinTokensQ8_0)) return TiledRows<Q8_0Tiles>(w, in, row_begin, row_end, y);
#endif
#if SQUEEZEKV_X86_BYTE_DOT
  if (w.repacked != nullptr) return HalfTileRows<Q8_0HalfTiles>(w, in, row_begin, row_end, y);
#endif
  QuantizedRows<Q8_0Rows>(w, in, row_begin, row_end, y);
}

// Groups [group_begin, group_end) of w's repacked layout into out (repack_groups checks that
// this target can: can_repack).
void RepackGroupsQ8_0(const WeightMatrix& w, int64_t group_begin, int64_t group_end, uint8_t* out) {
#if SQUEEZEKV_VNNI_TILES
  if (HasVnni()) return RepackGroupsOf<Q8_0Tiles>(w, group_begin, group_end, out);
#endif
  repacked::q8_0_repack_groups_by_copies(w, group_begin, group_end, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(MatmulRowsQ8_0);
HWY_EXPORT(RepackGroupsQ8_0);

namespace {

void rows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end, float* y) {
  HWY_DYNAMIC_DISPATCH(MatmulRowsQ8_0)(w, in, row_begin, row_end, y);
}

void repack_groups(const WeightMatrix& w, int64_t group_begin, int64_t group_end, uint8_t* out) {
  HWY_DYNAMIC_DISPATCH(RepackGroupsQ8_0)(w, group_begin, group_end, out);
}

// Block j of row `lane` of a repacked group, as GGUF stores it (34 bytes).
void read_unit(const uint8_t* group, int64_t n_blocks, int64_t j, size_t lane, uint8_t* block) {
  using namespace repacked;
  std::memcpy(
      block,
      group + static_cast<size_t>(n_blocks) * kQ8_0CodeBytes + static_cast<size_t>(j) * kQ8_0HalfBytes + 2 * lane, 2);
  const uint8_t* codes = group + static_cast<size_t>(j) * kQ8_0CodeBytes + 4 * lane;
  for (size_t i = 0; i < quant::q8_0_elems; ++i) block[2 + i] = codes[(i / 4) * 64 + i % 4] ^ 0x80;
}

constexpr detail::RepackedLayout kRepacked{repack_groups, read_unit};

}  // namespace

extern const detail::WeightKernels q8_0_kernels;
const detail::WeightKernels q8_0_kernels{rows, &kRepacked};

}  // namespace squeezekv
#endif  // HWY_ONCE
