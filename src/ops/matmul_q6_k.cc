// Q6_K weights (super-blocks of 256 elements in 16 sub-blocks of 16: low nibbles, high 2 bits, int8
// scales, fp16 d; value = d * scale_s * (q - 32)): the row kernel, the prompt tiles and the
// repacked layout (repacked_weights.h) with its tiles. Compiled once per SIMD target
// (foreach_target); the driver (matmul.cc) reaches MatmulRowsQ6_K through the traits table
// (tensor_type.cc).
// clang-format off: the target include must come first, then foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul_q6_k.cc"
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

#ifndef SQUEEZEKV_OPS_MATMUL_Q6_K_ONCE_
#define SQUEEZEKV_OPS_MATMUL_Q6_K_ONCE_
namespace squeezekv::repacked {
// Q6_K, per 16 rows and super-block: ql (32 vectors), qh (16), scale words (4); the fp16 d of all
// super-blocks after the last.
inline constexpr size_t kQ6_KQh = 32 * 64, kQ6_KWords = kQ6_KQh + 16 * 64, kQ6_KUnitBytes = kQ6_KWords + 4 * 64;

// Groups [g0, g1) of w's layout by plain copies: the bytes Q6_KRepackedTiles::repack_to writes.
inline void q6_k_repack_groups_by_copies(const WeightMatrix& w, int64_t g0, int64_t g1, uint8_t* out) {
  const auto units_bytes = static_cast<size_t>(w.n_cols / quant::q6_k_elems) * kQ6_KUnitBytes;
  repack_groups_by_copies(w, g0, g1, out, [&](const uint8_t* block, uint8_t* group, size_t b, size_t lane) {
    uint8_t* unit = group + b * kQ6_KUnitBytes;
    for (size_t v = 0; v < 48; ++v) std::memcpy(unit + 64 * v + 4 * lane, block + 4 * v, 4);  // ql, then qh
    for (size_t k = 0; k < 4; ++k) {
      std::memcpy(unit + kQ6_KWords + 64 * k + 4 * lane, block + quant::q6_k_scales_offset + 4 * k, 4);
    }
    std::memcpy(group + units_bytes + b * 32 + 2 * lane, block + quant::q6_k_d_offset, 2);
  });
}
}  // namespace squeezekv::repacked
#endif

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Q6_K, one token, on int16 lanes (every target; the x86 targets use DotQ6_K below instead).
HWY_INLINE float DotQ6_KWide(const uint8_t* row, const int16_t* xq, const float* xs, int64_t n) {
  const D16 d16;
  const D32 d32;
  const DW dw;
  const size_t lanes = hn::Lanes(d16);
  const auto low_mask = hn::Set(d16, 0xf);
  const auto two_bits = hn::Set(d16, 3);
  const auto offset = hn::Set(d16, 32);
  auto acc = hn::Zero(dw);
  for (int64_t b = 0; b < n / quant::q6_k_elems; ++b) {
    const uint8_t* block = row + b * quant::q6_k_bytes;
    const float d = LoadHalf(block + quant::q6_k_d_offset);
    const auto* scales = reinterpret_cast<const int8_t*>(block + quant::q6_k_scales_offset);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = block + 64 * h;
      const uint8_t* qh = block + quant::q6_k_qh_offset + 32 * h;
      const int16_t* qx = xq + b * 256 + 128 * h;
      const int64_t xb = b * 8 + 4 * h;       // x blocks of elements l, l + 32, l + 64, l + 96
      for (int part = 0; part < 2; ++part) {  // 16 elements per scale
        const int8_t* sc = scales + 8 * h + part;
        auto s1 = hn::Zero(d32), s2 = hn::Zero(d32), s3 = hn::Zero(d32), s4 = hn::Zero(d32);
        auto o1 = hn::Zero(d32), o2 = hn::Zero(d32), o3 = hn::Zero(d32), o4 = hn::Zero(d32);
        for (size_t l = static_cast<size_t>(16 * part); l < static_cast<size_t>(16 * part + 16); l += lanes) {
          const auto a = LoadBytes(ql + l);
          const auto c = LoadBytes(ql + 32 + l);
          const auto high = LoadBytes(qh + l);
          const auto q1 = hn::Sub(hn::Or(hn::And(a, low_mask), hn::ShiftLeft<4>(hn::And(high, two_bits))), offset);
          const auto q2 = hn::Sub(
              hn::Or(hn::And(c, low_mask), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<2>(high), two_bits))), offset);
          const auto q3 = hn::Sub(
              hn::Or(hn::ShiftRight<4>(a), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<4>(high), two_bits))), offset);
          const auto q4 = hn::Sub(hn::Or(hn::ShiftRight<4>(c), hn::ShiftLeft<4>(hn::ShiftRight<6>(high))), offset);
          s1 = hn::ReorderWidenMulAccumulate(d32, q1, hn::LoadU(d16, qx + l), s1, o1);
          s2 = hn::ReorderWidenMulAccumulate(d32, q2, hn::LoadU(d16, qx + 32 + l), s2, o2);
          s3 = hn::ReorderWidenMulAccumulate(d32, q3, hn::LoadU(d16, qx + 64 + l), s3, o3);
          s4 = hn::ReorderWidenMulAccumulate(d32, q4, hn::LoadU(d16, qx + 96 + l), s4, o4);
        }
        s1 = hn::RearrangeToOddPlusEven(s1, o1);
        s2 = hn::RearrangeToOddPlusEven(s2, o2);
        s3 = hn::RearrangeToOddPlusEven(s3, o3);
        s4 = hn::RearrangeToOddPlusEven(s4, o4);
        acc = hn::MulAdd(hn::ConvertTo(dw, s1), hn::Set(dw, d * static_cast<float>(sc[0]) * xs[xb]), acc);
        acc = hn::MulAdd(hn::ConvertTo(dw, s2), hn::Set(dw, d * static_cast<float>(sc[2]) * xs[xb + 1]), acc);
        acc = hn::MulAdd(hn::ConvertTo(dw, s3), hn::Set(dw, d * static_cast<float>(sc[4]) * xs[xb + 2]), acc);
        acc = hn::MulAdd(hn::ConvertTo(dw, s4), hn::Set(dw, d * static_cast<float>(sc[6]) * xs[xb + 3]), acc);
      }
    }
  }
  return Sum(acc);
}

#if SQUEEZEKV_X86_BYTE_DOT
// The 6-bit values of a Q6_K super-block as 8 streams of 32 bytes (0..63): stream 4h + j holds
// elements 128h + 32j + l for l < 32, i.e. x block 4h + j, rebuilt from ql and qh.
HWY_INLINE void Q6_KStreams(const uint8_t* block, __m256i* q) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i bits45 = _mm256_set1_epi8(0x30);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = block + 64 * h;
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
    const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + quant::q6_k_qh_offset + 32 * h));
    q[4 * h] = _mm256_or_si256(_mm256_and_si256(a, low4), _mm256_and_si256(_mm256_slli_epi16(high, 4), bits45));
    q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(c, low4), _mm256_and_si256(_mm256_slli_epi16(high, 2), bits45));
    q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), low4), _mm256_and_si256(high, bits45));
    q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), low4),
                                   _mm256_and_si256(_mm256_srli_epi16(high, 2), bits45));
  }
}

// Q6_K rows dotted with K tokens on x86: each half super-block (128 elements) is 4 streams of 32
// 6-bit values (elements l, l + 32, l + 64, l + 96 for l < 32, each one x block), rebuilt as bytes
// from ql and qh with shifts and masks, then vpmaddubsw against int8 activations. The -32 offset
// is vpmaddubsw(32, x) subtracted in int16 (|pairs| <= 2 * 32 * 127), and the two int8 sub-block
// scales of a stream enter through vpmaddwd (lanes 0-7: elements 0-15, 8-15: elements 16-31).
// The 8 streams' int32 vectors are reduced together (lane = x block), so a super-block costs one
// conversion and one TreeSum8 per token. Per-token arithmetic does not depend on K.
template <int K>
HWY_INLINE void DotQ6_K(const uint8_t* row, const TokenQ8* x, int64_t n, float* out) {
  static_assert(hn::MaxLanes(DS()) == 8, "one 256-bit vector per super-block's x blocks");
  const DS ds;
  const __m256i offset = _mm256_set1_epi8(32);
  // pshufb controls: bytes [2p x 8, 2p + 1 x 8] for the sub-block pair of stream p.
  __m128i pair_ctrl[8];
  for (int p = 0; p < 8; ++p) {
    pair_ctrl[p] = _mm_set_epi64x(static_cast<int64_t>(0x0101010101010101ull * static_cast<uint64_t>(2 * p + 1)),
                                  static_cast<int64_t>(0x0101010101010101ull * static_cast<uint64_t>(2 * p)));
  }
  float acc[K] = {};
  for (int64_t b = 0; b < n / quant::q6_k_elems; ++b) {
    const uint8_t* block = row + b * quant::q6_k_bytes;
    prefetch_ahead(block, quant::q6_k_bytes);
    const auto d = hn::Set(ds, LoadHalf(block + quant::q6_k_d_offset));
    const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + quant::q6_k_scales_offset));
    __m256i q[8], scale[8];  // stream 4h + j: its 32 values as bytes, and its two scales as int16
    Q6_KStreams(block, q);
    for (int p = 0; p < 8; ++p) scale[p] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, pair_ctrl[p]));
    for (int k = 0; k < K; ++k) {
      const int8_t* xk = x[k].q8 + b * quant::q6_k_elems;
      __m256i dots[8];
      for (int p = 0; p < 8; ++p) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xk + 32 * p));
        const __m256i pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(q[p], xv), _mm256_maddubs_epi16(offset, xv));
        dots[p] = _mm256_madd_epi16(pairs, scale[p]);
      }
      const auto sums = hn::Vec<DS>{_mm256_cvtepi32_ps(SumEachOf8(dots))};
      acc[k] += TreeSum8(hn::Mul(sums, hn::Mul(d, hn::LoadU(ds, x[k].scale + b * 8))));
    }
  }
  for (int k = 0; k < K; ++k) out[k] = acc[k];
}

// The half-group tiles over the repacked layout (matmul_half_tiles-inl.h). An x block's 6-bit
// values (0..63) meet the activations in vpmaddubsw; two products add up in int16 (at most
// 2 * 2 * 63 * 128 = 32256) and vpmaddwd by the half's int8 scale (as int16 pairs) widens them,
// and the -32 offset enters as q6_k_offset (-32 times the half's activation sum) times the scale:
// the row kernel's exact integer dot in another order. The float products and their tree are
// DotQ6_K's, lane by lane, so the bits are the row kernel's.
struct Q6_KHalfTiles {
  static constexpr int64_t kUnitCols = quant::q6_k_elems;

  // Vector g of x block 4 * h6 + part (columns 4g..4g + 3 of it) for half h: Q6_KStreams' stream,
  // rebuilt from the ql and qh vectors as Q6_KRepackedTiles::values4 does.
  static HWY_INLINE __m256i Values(const uint8_t* unit, size_t h, int h6, int part, int g) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
    auto load = [&](size_t vector) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + 64 * vector + 32 * h));
    };
    const __m256i q = load(static_cast<size_t>((2 * h6 + part % 2) * 8 + g));  // a (parts 0, 2) or c (1, 3)
    const __m256i high = load(repacked::kQ6_KQh / 64 + static_cast<size_t>(h6 * 8 + g));
    const __m256i low = part < 2 ? _mm256_and_si256(q, low4) : _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    __m256i top;
    switch (part) {
      case 0:
        top = _mm256_slli_epi16(high, 4);
        break;
      case 1:
        top = _mm256_slli_epi16(high, 2);
        break;
      case 2:
        top = high;
        break;
      default:
        top = _mm256_srli_epi16(high, 2);
        break;
    }
    return _mm256_or_si256(low, _mm256_and_si256(top, bits45));
  }

  // The dots of H halves' rows (from half h0 on) with T tokens over n_super super-blocks from a
  // group: out[i * T + k] lane r = row r of half h0 + i with token k.
  template <int T, int H>
  static HWY_INLINE void Tile(const uint8_t* group, int64_t n_super, size_t h0, const TokenQ8* x, __m256* out) {
    const uint8_t* halves = group + n_super * repacked::kQ6_KUnitBytes;
    const __m256i low16 = _mm256_set1_epi32(0xffff);
    __m256 acc[H][T];
    for (int i = 0; i < H; ++i) {
      for (int k = 0; k < T; ++k) acc[i][k] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < n_super; ++b) {
      const uint8_t* unit = group + b * repacked::kQ6_KUnitBytes;
      if constexpr (T == 1) prefetch_ahead(unit, repacked::kQ6_KUnitBytes, half_tiles::kOneTokenAheadBytes);
      __m256 d[H];
      __m256i scale[H][16], scale_pairs[H][16];  // per half and sub-block of 16: int32, and as int16 pairs
      for (int i = 0; i < H; ++i) {
        const size_t h = h0 + static_cast<size_t>(i);
        d[i] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(halves + 32 * b + 16 * h)));
        for (int word = 0; word < 4; ++word) {
          const __m256i w = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(unit + repacked::kQ6_KWords + 64 * static_cast<size_t>(word) + 32 * h));
          for (int byte = 0; byte < 4; ++byte) {
            const __m256i s = _mm256_srai_epi32(_mm256_slli_epi32(w, 24 - 8 * byte), 24);
            scale[i][4 * word + byte] = s;
            scale_pairs[i][4 * word + byte] = _mm256_or_si256(_mm256_and_si256(s, low16), _mm256_slli_epi32(s, 16));
          }
        }
      }
      __m256 p[H][T][8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {  // x block j of the super-block
        const int64_t block = b * 8 + j;
        __m256i dot[H][T];  // the offset's share first: q6_k_offset of each half times its scale
        for (int k = 0; k < T; ++k) {
          const __m256i off_lo = half_tiles::Broadcast4(x[k].q6_k_offset + 2 * block);
          const __m256i off_hi = half_tiles::Broadcast4(x[k].q6_k_offset + 2 * block + 1);
          for (int i = 0; i < H; ++i) {
            dot[i][k] = _mm256_add_epi32(_mm256_mullo_epi32(off_lo, scale[i][2 * j]),
                                         _mm256_mullo_epi32(off_hi, scale[i][2 * j + 1]));
          }
        }
        for (int g = 0; g < 8; g += 2) {  // columns 4g..4g + 7: half g / 4 of the block
          __m256i v0[H], v1[H];
          for (int i = 0; i < H; ++i) {
            v0[i] = Values(unit, h0 + static_cast<size_t>(i), j / 4, j % 4, g);
            v1[i] = Values(unit, h0 + static_cast<size_t>(i), j / 4, j % 4, g + 1);
          }
          for (int k = 0; k < T; ++k) {
            const int8_t* xq = x[k].q8 + block * 32 + 4 * g;
            const __m256i x0 = half_tiles::Broadcast4(xq), x1 = half_tiles::Broadcast4(xq + 4);
            for (int i = 0; i < H; ++i) {
              const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(v0[i], x0), _mm256_maddubs_epi16(v1[i], x1));
              dot[i][k] = _mm256_add_epi32(dot[i][k], _mm256_madd_epi16(pairs, scale_pairs[i][2 * j + g / 4]));
            }
          }
        }
        for (int i = 0; i < H; ++i) {
          for (int k = 0; k < T; ++k) {
            p[i][k][j] =
                _mm256_mul_ps(_mm256_cvtepi32_ps(dot[i][k]), _mm256_mul_ps(d[i], _mm256_set1_ps(x[k].scale[block])));
          }
        }
      }
      for (int i = 0; i < H; ++i) {
        for (int k = 0; k < T; ++k) acc[i][k] = _mm256_add_ps(acc[i][k], half_tiles::Tree8(p[i][k]));
      }
    }
    for (int i = 0; i < H; ++i) {
      for (int k = 0; k < T; ++k) out[i * T + k] = acc[i][k];
    }
  }
};
#else
template <int K>
HWY_INLINE void DotQ6_K(const uint8_t* row, const TokenQ8* x, int64_t n, float* out) {
  for (int k = 0; k < K; ++k) out[k] = DotQ6_KWide(row, x[k].q, x[k].scale, n);
}
#endif

#if SQUEEZEKV_VNNI_TILES
struct Q6_KTiles : PanelView {
  static constexpr int64_t kUnitCols = quant::q6_k_elems, kUnitBytes = quant::q6_k_bytes, kStreamUnits = 1;
  static constexpr int kMaxTokens = 4;

  // Q6_K: each row's super-block is first rebuilt as 256 bytes (0..63) by the row kernel's own
  // Q6_KStreams, then regrouped; the -32 offset is undone in integers by the tile.
  static HWY_INLINE SQUEEZEKV_VNNI void pack(const uint8_t* rows, size_t stride, int valid, int64_t n_super,
                                             Panel& panel) {
    panel.bytes.reserve(static_cast<size_t>(n_super) * 64);
    panel.factor.reserve(static_cast<size_t>(n_super));
    panel.scales.reserve(static_cast<size_t>(n_super) * 16);
    size_t offsets[kTileRows];
    RowOffsets(stride, valid, offsets);
    HWY_ALIGN uint8_t values[kTileRows][quant::q6_k_elems];
    size_t value_offsets[kTileRows];
    for (int r = 0; r < kTileRows; ++r) value_offsets[r] = static_cast<size_t>(r) * quant::q6_k_elems;
    for (int64_t b = 0; b < n_super; ++b) {
      HWY_ALIGN uint16_t d[kTileRows];
      HWY_ALIGN int32_t scale[16][kTileRows];  // [sub-block of 16][row]
      for (int r = 0; r < kTileRows; ++r) {
        const uint8_t* block = rows + offsets[r] + b * quant::q6_k_bytes;
        __m256i q[8];
        Q6_KStreams(block, q);
        for (int p = 0; p < 8; ++p) _mm256_store_si256(reinterpret_cast<__m256i*>(values[r] + 32 * p), q[p]);
        std::memcpy(&d[r], block + quant::q6_k_d_offset, 2);
        const auto* sc = reinterpret_cast<const int8_t*>(block + quant::q6_k_scales_offset);
        for (int i = 0; i < 16; ++i) scale[i][r] = sc[i];
      }
      __m512i* out = panel.bytes.data() + b * 64;
      for (int p = 0; p < 8; ++p) TransposeRows(values[0] + 32 * p, value_offsets, out + p * 8);
      panel.factor.data()[b] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d)));
      for (int i = 0; i < 16; ++i) panel.scales.data()[b * 16 + i] = _mm512_load_si512(scale[i]);
    }
  }

  // Q6_K: per x block, the dots of its two 16-column halves (each started at -32 * the half's
  // activation sum), times the halves' int8 scales, summed in integers: the row kernel's exact dot.
  template <int T>
  static HWY_INLINE SQUEEZEKV_VNNI void tile(View panel, int64_t n_super, const TokenQ8* x, int64_t x0, __m512* a0,
                                             __m512*) {
    const auto* const bytes_ptr = panel->bytes.data();
    const auto* const factor_ptr = panel->factor.data();
    const auto* const scales_ptr = panel->scales.data();
    const int64_t n_blocks = n_super * 8;
    auto product = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA {
      const __m512i* w = bytes_ptr + j * 8;
      __m512i lo[T], hi[T];
      for (int k = 0; k < T; ++k) {
        lo[k] = Broadcast32(x[k].q6_k_offset + 2 * (x0 + j));
        hi[k] = Broadcast32(x[k].q6_k_offset + 2 * (x0 + j) + 1);
      }
      BlockHalfDots<T>(w, x, (x0 + j) * 32, 0, lo);
      BlockHalfDots<T>(w, x, (x0 + j) * 32, 4, hi);
      const __m512i scale_lo = scales_ptr[2 * j], scale_hi = scales_ptr[2 * j + 1];
      const __m512 d = factor_ptr[j / 8];
      for (int k = 0; k < T; ++k) {
        const __m512i dot = _mm512_add_epi32(_mm512_mullo_epi32(lo[k], scale_lo), _mm512_mullo_epi32(hi[k], scale_hi));
        p[k] = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(d, _mm512_set1_ps(x[k].scale[x0 + j])));
      }
    };
    for (int64_t j = 0; j < n_blocks; j += 8) AddTreeOf8<T>(product, j, a0);
  }

  static HWY_INLINE SQUEEZEKV_VNNI __m512 combine(__m512 a0, __m512) { return a0; }
};

// Repacked Q6_K (repacked_weights.h), per super-block of 16 rows a unit of 3328 bytes: the ql bytes
// regrouped as the panel regroups bytes (4 runs of 32 bytes, 8 vectors each), the qh bytes likewise
// (2 runs, 16 vectors), the 16 int8 scales as 4 dwords (4 vectors, lane = row); after every unit of
// the group, the rows' fp16 d (32 bytes per super-block). Its tile rebuilds the 6-bit values from
// ql and qh in registers, as Q6_KStreams does per row (bytewise, so the regrouping does not change
// the formula), and sign-extends the scales it needs: Q6_KTiles' arithmetic, with no panel.
struct Q6_KRepackedTiles {
  static constexpr int64_t kUnitCols = quant::q6_k_elems, kUnitBytes = repacked::kQ6_KUnitBytes;
  static constexpr int kMaxTokens = 4;
  static constexpr int64_t kRepackedStreamUnits = 1;
  struct View {
    const uint8_t* units;
    const __m256i* halves;
  };

  static HWY_INLINE SQUEEZEKV_VNNI void repack_to(const uint8_t* rows, size_t stride, int valid, int64_t n_super,
                                                  uint8_t* group) {
    size_t offsets[kTileRows];
    RowOffsets(stride, valid, offsets);
    auto* halves = reinterpret_cast<uint16_t*>(group + n_super * kUnitBytes);
    for (int64_t b = 0; b < n_super; ++b) {
      const uint8_t* block = rows + b * quant::q6_k_bytes;
      auto* out = reinterpret_cast<__m512i*>(group + b * kUnitBytes);
      for (int run = 0; run < 6; ++run) TransposeRows(block + 32 * run, offsets, out + 8 * run);  // ql, then qh
      auto* words = reinterpret_cast<uint32_t*>(out + repacked::kQ6_KWords / 64);
      for (int r = 0; r < kTileRows; ++r) {
        for (int k = 0; k < 4; ++k) {
          std::memcpy(&words[k * kTileRows + r], block + offsets[r] + quant::q6_k_scales_offset + 4 * k, 4);
        }
        std::memcpy(&halves[b * kTileRows + r], block + offsets[r] + quant::q6_k_d_offset, 2);
      }
    }
  }

  // Vector g of x blocks 4h..4h + 3 (elements 32j..32j + 31 of x block j) of a unit: Q6_KStreams'
  // streams 4h..4h + 3, regrouped, from one load of each ql and qh vector.
  static HWY_INLINE SQUEEZEKV_VNNI void values4(const __m512i* unit, int h, int g, __m512i* out) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
    const __m512i a = _mm512_load_si512(unit + 2 * h * 8 + g), c = _mm512_load_si512(unit + (2 * h + 1) * 8 + g);
    const __m512i high = _mm512_load_si512(unit + repacked::kQ6_KQh / 64 + h * 8 + g);
    out[0] = _mm512_or_si512(_mm512_and_si512(a, low4), _mm512_and_si512(_mm512_slli_epi16(high, 4), bits45));
    out[1] = _mm512_or_si512(_mm512_and_si512(c, low4), _mm512_and_si512(_mm512_slli_epi16(high, 2), bits45));
    out[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), low4), _mm512_and_si512(high, bits45));
    out[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(c, 4), low4),
                             _mm512_and_si512(_mm512_srli_epi16(high, 2), bits45));
  }

  // Scale i of the unit's 16 rows (byte i % 4 of word i / 4), sign-extended.
  static HWY_INLINE SQUEEZEKV_VNNI __m512i scale(const __m512i* unit, int i) {
    const __m512i word = _mm512_load_si512(unit + repacked::kQ6_KWords / 64 + i / 4);
    return _mm512_srai_epi32(_mm512_slli_epi32(word, 24 - 8 * (i % 4)), 24);
  }

  template <int T>
  static HWY_INLINE SQUEEZEKV_VNNI void tile(View view, int64_t n_super, const TokenQ8* x, int64_t x0, __m512* a0,
                                             __m512*) {
    for (int64_t b = 0; b < n_super; ++b) {
      const auto* unit = reinterpret_cast<const __m512i*>(view.units + b * kUnitBytes);
      const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(view.halves + b));
      const int64_t first = x0 + b * 8;  // the activation block of x block 0
      // An x block's product: the int8 scales of its two halves times their integer dots, summed
      // in integers (the row kernel's exact dot), times d times the token's block scale.
      auto scaled = [&](__m512i lo, __m512i hi, int64_t j, int k) SQUEEZEKV_VNNI_LAMBDA {
        const __m512i scale_lo = scale(unit, static_cast<int>(2 * j)),
                      scale_hi = scale(unit, static_cast<int>(2 * j + 1));
        const __m512i dot = _mm512_add_epi32(_mm512_mullo_epi32(lo, scale_lo), _mm512_mullo_epi32(hi, scale_hi));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(d, _mm512_set1_ps(x[k].scale[first + j])));
      };
      if constexpr (T == 1) {
        // One token (a decode step): each ql and qh vector is loaded once for the x blocks it
        // feeds (ql: 2, qh: 4), where the general tile reloads it per x block. The integer dots
        // are exact in any order and the products and tree are the general tile's: same bits.
        // Unrolled so that the 16 accumulators stay in registers (indexed by a loop counter, GCC
        // kept them on the stack).
        __m512i lo[8], hi[8];
        for (int j = 0; j < 8; ++j) {
          lo[j] = Broadcast32(x[0].q6_k_offset + 2 * (first + j));
          hi[j] = Broadcast32(x[0].q6_k_offset + 2 * (first + j) + 1);
        }
        const int8_t* xq = x[0].q8 + first * 32;
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
          for (int g = 0; g < 8; ++g) {
            __m512i w[4];
            values4(unit, h, g, w);
            for (int part = 0; part < 4; ++part) {
              const int j = 4 * h + part;
              __m512i& acc = g < 4 ? lo[j] : hi[j];
              acc = DotBroadcast<1>(acc, w[part], xq + 32 * j + 4 * g);
            }
          }
        }
        AddTreeOf8<1>([&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA { p[0] = scaled(lo[j], hi[j], j, 0); }, 0, a0);
      } else {
        auto product = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA {
          __m512i lo[T], hi[T];
          for (int k = 0; k < T; ++k) {
            lo[k] = Broadcast32(x[k].q6_k_offset + 2 * (first + j));
            hi[k] = Broadcast32(x[k].q6_k_offset + 2 * (first + j) + 1);
          }
          const int64_t column = (first + j) * 32;
          for (int g = 0; g < 8; ++g) {
            __m512i w[4];
            values4(unit, static_cast<int>(j / 4), g, w);  // only stream j % 4 is kept
            for (int k = 0; k < T; ++k) {
              __m512i& s = g < 4 ? lo[k] : hi[k];
              s = DotBroadcast<T>(s, w[j % 4], x[k].q8 + column + 4 * g);
            }
          }
          for (int k = 0; k < T; ++k) p[k] = scaled(lo[k], hi[k], j, k);
        };
        AddTreeOf8<T>(product, 0, a0);
      }
    }
  }

  static HWY_INLINE SQUEEZEKV_VNNI __m512 combine(__m512 a0, __m512) { return a0; }

  static HWY_INLINE View repacked_view(const uint8_t* group, int64_t n_super, int64_t u0, int64_t, Panel&) {
    return View{group + u0 * kUnitBytes, reinterpret_cast<const __m256i*>(group + n_super * kUnitBytes) + u0};
  }

  // Super-blocks [u0, u0 + count) of the 16 rows rebuilt into Q6_KTiles' panel, whose tiles then
  // share the rebuilding across their tokens: for 4 tokens or more the fused tile, which redoes it
  // for every 4, is slower (`ops_bench` matmul/Q6_K/.../repacked/tokens:16).
  static HWY_INLINE SQUEEZEKV_VNNI const Panel* unpack(const uint8_t* group, int64_t n_super, int64_t u0, int64_t count,
                                                       Panel& panel) {
    panel.bytes.reserve(static_cast<size_t>(count) * 64);
    panel.factor.reserve(static_cast<size_t>(count));
    panel.scales.reserve(static_cast<size_t>(count) * 16);
    const View view = repacked_view(group, n_super, u0, count, panel);
    for (int64_t b = 0; b < count; ++b) {
      const auto* unit = reinterpret_cast<const __m512i*>(view.units + b * kUnitBytes);
      for (int h = 0; h < 2; ++h) {
        for (int g = 0; g < 8; ++g) {
          __m512i w[4];
          values4(unit, h, g, w);
          for (int part = 0; part < 4; ++part) panel.bytes.data()[b * 64 + (4 * h + part) * 8 + g] = w[part];
        }
      }
      panel.factor.data()[b] = _mm512_cvtph_ps(_mm256_load_si256(view.halves + b));
      for (int i = 0; i < 16; ++i) panel.scales.data()[b * 16 + i] = scale(unit, i);
    }
    return &panel;
  }
  using WholeKind = Q6_KTiles;
  static HWY_INLINE SQUEEZEKV_VNNI const Panel* whole_view(const uint8_t* group, int64_t n_super, Panel& panel) {
    return unpack(group, n_super, 0, n_super, panel);
  }
  static HWY_INLINE void repacked_prefetch(const uint8_t* group, int64_t n_super, int64_t u0, int64_t u1) {
    const auto* bytes = reinterpret_cast<const char*>(group);
    for (int64_t b = u0 * kUnitBytes; b < u1 * kUnitBytes; b += 64) _mm_prefetch(bytes + b, _MM_HINT_T1);
    const char* halves = bytes + n_super * kUnitBytes;
    for (int64_t b = u0 * 32; b < u1 * 32; b += 64) _mm_prefetch(halves + b, _MM_HINT_T1);
  }
};

// Repacked Q6_K for calls of 4 to 16 tokens: each streamed piece rebuilt into the panel
// (Q6_KRepackedTiles::unpack), then Q6_KTiles' own tiles.
struct Q6_KPanelPieces : Q6_KTiles {
  static constexpr int64_t kRepackedStreamUnits = 1;
  using WholeKind = Q6_KTiles;
  static HWY_INLINE SQUEEZEKV_VNNI View repacked_view(const uint8_t* group, int64_t n_super, int64_t u0, int64_t count,
                                                      Panel& panel) {
    return Q6_KRepackedTiles::unpack(group, n_super, u0, count, panel);
  }
  static HWY_INLINE SQUEEZEKV_VNNI View whole_view(const uint8_t* group, int64_t n_super, Panel& panel) {
    return Q6_KRepackedTiles::whole_view(group, n_super, panel);
  }
  static HWY_INLINE void repacked_prefetch(const uint8_t* group, int64_t n_super, int64_t u0, int64_t u1) {
    Q6_KRepackedTiles::repacked_prefetch(group, n_super, u0, u1);
  }
};

// Q6_K's one-token pieces ask for the next two (PrefetchWindow, matmul_tiles-inl.h).
template <>
struct PrefetchWindow<Q6_KRepackedTiles> {
  static constexpr int64_t first = 1, count = 2;
};
#endif  // SQUEEZEKV_VNNI_TILES

struct Q6_KRows {
  template <int K>
  static HWY_INLINE void Dots(const uint8_t* row, const TokenQ8* x, int64_t n, float* out) {
    DotQ6_K<K>(row, x, n, out);
  }
};

// Rows [row_begin, row_end) of w times every token of the call.
void MatmulRowsQ6_K(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end,
                    float* HWY_RESTRICT y) {
#if SQUEEZEKV_VNNI_TILES
  if (w.repacked != nullptr && HasVnni()) {
    if (in.n_tok >= kTileMinTokens) return RepackedRows<Q6_KPanelPieces>(w, in, row_begin, row_end, y);
    return RepackedRows<Q6_KRepackedTiles>(w, in, row_begin, row_end, y);
  }
  if (UseTiles(in.n_tok, kTileMinTokens)) return TiledRows<Q6_KTiles>(w, in, row_begin, row_end, y);
#endif
#if SQUEEZEKV_X86_BYTE_DOT
  if (w.repacked != nullptr) return HalfTileRows<Q6_KHalfTiles>(w, in, row_begin, row_end, y);
#endif
  QuantizedRows<Q6_KRows>(w, in, row_begin, row_end, y);
}

// Groups [group_begin, group_end) of w's repacked layout into out (repack_groups checks that
// this target can: can_repack).
void RepackGroupsQ6_K(const WeightMatrix& w, int64_t group_begin, int64_t group_end, uint8_t* out) {
#if SQUEEZEKV_VNNI_TILES
  if (HasVnni()) return RepackGroupsOf<Q6_KRepackedTiles>(w, group_begin, group_end, out);
#endif
  repacked::q6_k_repack_groups_by_copies(w, group_begin, group_end, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(MatmulRowsQ6_K);
HWY_EXPORT(RepackGroupsQ6_K);

namespace {

void rows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end, float* y) {
  HWY_DYNAMIC_DISPATCH(MatmulRowsQ6_K)(w, in, row_begin, row_end, y);
}

void repack_groups(const WeightMatrix& w, int64_t group_begin, int64_t group_end, uint8_t* out) {
  HWY_DYNAMIC_DISPATCH(RepackGroupsQ6_K)(w, group_begin, group_end, out);
}

// Super-block j of row `lane` of a repacked group, as GGUF stores it (210 bytes).
void read_unit(const uint8_t* group, int64_t n_super, int64_t j, size_t lane, uint8_t* block) {
  using namespace repacked;
  const uint8_t* unit = group + static_cast<size_t>(j) * kQ6_KUnitBytes;
  for (size_t i = 0; i < 192; ++i) {  // ql then qh: 6 runs of 32 bytes, 8 vectors each
    block[i] = unit[(i / 32 * 8 + i % 32 / 4) * 64 + 4 * lane + i % 4];
  }
  for (size_t k = 0; k < 4; ++k)
    std::memcpy(block + quant::q6_k_scales_offset + 4 * k, unit + kQ6_KWords + k * 64 + 4 * lane, 4);
  std::memcpy(block + quant::q6_k_d_offset,
              group + static_cast<size_t>(n_super) * kQ6_KUnitBytes + static_cast<size_t>(j) * 32 + 2 * lane, 2);
}

constexpr detail::RepackedLayout kRepacked{repack_groups, read_unit};

}  // namespace

extern const detail::WeightKernels q6_k_kernels;
const detail::WeightKernels q6_k_kernels{rows, &kRepacked};

}  // namespace squeezekv
#endif  // HWY_ONCE
