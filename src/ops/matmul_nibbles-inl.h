// The kernels the formats of 16 bytes of nibbles a 32-element block share (low nibbles elements
// 0-15, high 16-31): Q4_0 (value = d * (q - 8)), Q4_1 (value = d * q + m) and Q5_0 (value =
// d * (q - 16), whose 5th bits come from a 32-bit qh before the nibbles). Each format's file
// (matmul_q4_0.cc, matmul_q4_1.cc, matmul_q5_0.cc) describes its blocks in a small struct F:
//   kHasMin (a minimum m after d), kFifthBit (Q5_0's qh), kBlockBytes, kCodesOffset (of the
//   nibbles), kFifthBitsOffset (of qh), kOffset (subtracted from the codes when !kHasMin) and
//   kOffsetShift (the activations' q8_0_offset, -128 * the block's sum of xq, >> kOffsetShift =
//   -kOffset * that sum).
// Per-target code with Highway's per-target include guard, as matmul_rows-inl.h.
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "ops/matmul_half_tiles-inl.h"
#include "ops/matmul_rows-inl.h"
#include "ops/matmul_tiles-inl.h"
#include "ops/nibble_repacked_layout.h"
#include "ops/stream_prefetch.h"

// clang-format off
#if defined(SQUEEZEKV_OPS_MATMUL_NIBBLES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SQUEEZEKV_OPS_MATMUL_NIBBLES_INL_H_
#undef SQUEEZEKV_OPS_MATMUL_NIBBLES_INL_H_
#else
#define SQUEEZEKV_OPS_MATMUL_NIBBLES_INL_H_
#endif
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Q5_0's 5th bits, the 32-bit qh of a block (element j's is bit j).
template <class F>
HWY_INLINE uint32_t LoadFifthBits(const uint8_t* block) {
  uint32_t qh;
  std::memcpy(&qh, block + F::kFifthBitsOffset, sizeof qh);
  return qh;
}

// Nibble rows on int16 lanes. Q4_1's minimum adds m * xs * (sum of xq) per block, the scaled sum
// the activations carry, summed apart from the code term and added at the end.
template <class F>
HWY_INLINE float DotNibbleRow(const uint8_t* row, const int16_t* xq, const float* xs, const float* x_sum, int64_t n) {
  const D16 d16;
  const D32 d32;
  const DW dw;
  const size_t lanes = hn::Lanes(d16);
  const auto low_mask = hn::Set(d16, 0xf);
  const auto offset = hn::Set(d16, F::kOffset);
  // Lane i of the vector for elements j.. tests bit j + i of a half of qh.
  alignas(64) static constexpr int16_t kBits[16] = {1,   2,   4,    8,    16,   32,   64,    128,
                                                    256, 512, 1024, 2048, 4096, 8192, 16384, -32768};
  auto acc = hn::Zero(dw);
  float acc_min = 0.0f;
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* block = row + b * F::kBlockBytes;
    const int16_t* qx = xq + b * 32;
    [[maybe_unused]] uint32_t qh = 0;
    if constexpr (F::kFifthBit) qh = LoadFifthBits<F>(block);
    auto sum0 = hn::Zero(d32), sum1 = hn::Zero(d32);
    for (size_t j = 0; j < 16; j += lanes) {
      const auto packed = LoadBytes(block + F::kCodesOffset + j);
      auto lo = hn::And(packed, low_mask);  // elements j..
      auto hi = hn::ShiftRight<4>(packed);  // elements 16 + j..
      if constexpr (F::kFifthBit) {
        const auto bits = hn::LoadU(d16, kBits + j);
        const auto fifth = hn::Set(d16, 16);
        lo = hn::Or(lo, hn::IfThenElseZero(hn::TestBit(hn::Set(d16, static_cast<int16_t>(qh & 0xffffu)), bits), fifth));
        hi = hn::Or(hi, hn::IfThenElseZero(hn::TestBit(hn::Set(d16, static_cast<int16_t>(qh >> 16)), bits), fifth));
      }
      if constexpr (!F::kHasMin) {
        lo = hn::Sub(lo, offset);
        hi = hn::Sub(hi, offset);
      }
      sum0 = hn::ReorderWidenMulAccumulate(d32, lo, hn::LoadU(d16, qx + j), sum0, sum1);
      sum0 = hn::ReorderWidenMulAccumulate(d32, hi, hn::LoadU(d16, qx + 16 + j), sum0, sum1);
    }
    const auto dot = hn::ConvertTo(dw, hn::RearrangeToOddPlusEven(sum0, sum1));
    acc = hn::MulAdd(dot, hn::Set(dw, LoadHalf(block) * xs[b]), acc);
    if constexpr (F::kHasMin) acc_min += LoadHalf(block + 2) * x_sum[b];
  }
  if constexpr (F::kHasMin) return Sum(acc) + acc_min;
  return Sum(acc);
}

#if SQUEEZEKV_X86_BYTE_DOT
// 16 bytes of nibbles laid out as Q4_0's (and Q4_1's) as 32 unsigned bytes 0..15 in element order.
HWY_INLINE __m256i NibbleCodes(const uint8_t* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i low4 = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(packed, 4), low4), _mm_and_si128(packed, low4));
}

// Q5_0's 32 5th bits as 32 bytes in element order: 16 where bit j of qh is set, else 0. Byte j
// takes byte j / 8 of qh (pshufb) and keeps bit j % 8 of it.
HWY_INLINE __m256i FifthBitBytes(uint32_t qh) {
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(qh)),
                          _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

// A block's codes as 32 unsigned bytes in element order (0..15, or 0..31 for Q5_0).
template <class F>
HWY_INLINE __m256i BlockCodes(const uint8_t* block) {
  const __m256i codes = NibbleCodes(block + F::kCodesOffset);
  if constexpr (F::kFifthBit) return _mm256_or_si256(codes, FifthBitBytes(LoadFifthBits<F>(block)));
  return codes;
}

// Nibble rows dotted with K tokens on x86: the codes meet the int8 activations as unsigned bytes
// (at most 2 * 31 * 127 a pair). Q4_0 and Q5_0 add -8 (-16) * (the block's sum of activations),
// the Q8_0 offset term / 16 (/ 8), in integers; Q4_1 adds m * (xs * sum of xq) per block (the
// activations' scaled sum, as Q4_K's mins) as a second float sum, added at the end. Runs of 8
// blocks are summed as trees (TreeSum8), then the blocks after the last run one by one: at 18 to
// 22 bytes a block, decoding is bound by this kernel.
template <class F, int K>
HWY_INLINE void DotNibbleTokens(const uint8_t* row, const TokenQ8* x, int64_t n, float* out) {
  constexpr bool kHasMin = F::kHasMin;
  constexpr int64_t kBlockBytes = F::kBlockBytes;
  const DS ds;
  float acc[K] = {}, acc_min[K] = {};
  const int64_t n_blocks = n / 32;
  int64_t b = 0;
  for (; b + 8 <= n_blocks; b += 8) {
    HWY_ALIGN float d[8], m[8];
    __m256i w[8];
    for (int i = 0; i < 8; ++i) {
      const uint8_t* block = row + (b + i) * kBlockBytes;
      d[i] = LoadHalf(block);
      if constexpr (kHasMin) m[i] = LoadHalf(block + 2);
      w[i] = BlockCodes<F>(block);
    }
    prefetch_ahead(row + b * kBlockBytes, 8 * kBlockBytes);
    const auto dv = hn::Load(ds, d);
    for (int k = 0; k < K; ++k) {
      const int8_t* xk = x[k].q8 + b * 32;
      __m256i dots[8];
      for (int i = 0; i < 8; ++i)
        dots[i] = ByteDot(w[i], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xk + 32 * i)));
      __m256i sums_i = SumEachOf8(dots);
      if constexpr (!kHasMin) {
        sums_i = _mm256_add_epi32(
            sums_i, _mm256_srai_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k].q8_0_offset + b)),
                                      F::kOffsetShift));
      }
      const auto sums = hn::Vec<DS>{_mm256_cvtepi32_ps(sums_i)};
      acc[k] += TreeSum8(hn::Mul(sums, hn::Mul(dv, hn::LoadU(ds, x[k].scale + b))));
      if constexpr (kHasMin) acc_min[k] += TreeSum8(hn::Mul(hn::Load(ds, m), hn::LoadU(ds, x[k].scaled_sum + b)));
    }
  }
  for (; b < n_blocks; ++b) {  // the last n_blocks % 8 blocks, one at a time
    const uint8_t* block = row + b * kBlockBytes;
    const __m256i wb = BlockCodes<F>(block);
    const float d = LoadHalf(block);
    for (int k = 0; k < K; ++k) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k].q8 + b * 32));
      int32_t sum = hn::GetLane(hn::SumOfLanes(DSI32(), hn::Vec<DSI32>{ByteDot(wb, xv)}));
      if constexpr (!kHasMin) sum += x[k].q8_0_offset[b] >> F::kOffsetShift;
      acc[k] += static_cast<float>(sum) * (d * x[k].scale[b]);
      if constexpr (kHasMin) acc_min[k] += LoadHalf(block + 2) * x[k].scaled_sum[b];
    }
  }
  for (int k = 0; k < K; ++k) out[k] = kHasMin ? acc[k] + acc_min[k] : acc[k];
}

// The half-group tiles of the nibble formats over their repacked layout (nibble_repacked_layout.h,
// matmul_half_tiles-inl.h): a block's vpmaddubsw products add up in int16 (Q4_0, Q4_1: 8 of at
// most 2 * 15 * 128, 30720; Q5_0, codes to 31: 4 of at most 2 * 31 * 128, 31744) before vpmaddwd,
// the offset term of Q4_0 and Q5_0 is added in integers, and the float products, runs of 8 as
// trees then the rest one by one, are DotNibbleTokens', lane by lane: the row kernel's bits.
template <class F>
struct NibbleHalfTiles {
  static constexpr int64_t kUnitCols = 32;
  static constexpr repacked::NibbleLayout kLayout{.fifth_bits = F::kFifthBit, .minimum = F::kHasMin};

  // Q5_0's fifth bits of vector v's low (elements 4v..4v + 3) or high (16 + 4v..) codes as bytes, 16
  // where set: each byte takes the byte of its row's qh that holds its bit (pshufb), then tests it.
  static HWY_INLINE __m256i FifthBytes(__m256i qh, int v, bool high) {
    const __m256i dword_starts = _mm256_set_epi8(12, 12, 12, 12, 8, 8, 8, 8, 4, 4, 4, 4, 0, 0, 0, 0, 12, 12, 12, 12, 8,
                                                 8, 8, 8, 4, 4, 4, 4, 0, 0, 0, 0);
    const __m256i spread = _mm256_shuffle_epi8(
        qh, _mm256_add_epi8(dword_starts, _mm256_set1_epi8(static_cast<char>((high ? 2 : 0) + v / 2))));
    const __m256i bit = _mm256_set1_epi32(v % 2 == 0 ? 0x08040201 : static_cast<int32_t>(0x80402010u));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(16));
  }

  // The dots of H halves' rows (from half h0 on) with T tokens over n_blocks blocks from a group:
  // out[i * T + k] lane r = row r of half h0 + i with token k.
  template <int T, int H>
  static HWY_INLINE void Tile(const uint8_t* group, int64_t n_blocks, size_t h0, const TokenQ8* x, __m256* out) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const uint8_t* d_half = group + kLayout.d_offset(n_blocks);
    const uint8_t* m_half = group + (F::kHasMin ? kLayout.m_offset(n_blocks) : 0);
    const uint8_t* fifth = group + kLayout.fifth_offset(n_blocks);
    // Vectors of int16 sums before a vpmaddwd: all 4 of a block, or 2 with Q5_0's larger codes.
    constexpr int kVectorsInt16 = F::kFifthBit ? 2 : 4;
    __m256 acc[H][T], acc_min[H][T];
    for (int i = 0; i < H; ++i) {
      for (int k = 0; k < T; ++k) acc[i][k] = acc_min[i][k] = _mm256_setzero_ps();
    }
    // The products of block j: p[i][k] = float(its dot) * (d * the token's block scale), and
    // Q4_1's m[i][k] = m * the token's scaled sum.
    auto products = [&](int64_t j, __m256(*p)[T], __m256(*m)[T]) {
      const uint8_t* codes = group + static_cast<size_t>(j) * repacked::NibbleLayout::kCodeBytes;
      if constexpr (T == 1) prefetch_ahead(codes, repacked::NibbleLayout::kCodeBytes, half_tiles::kOneTokenAheadBytes);
      [[maybe_unused]] __m256i qh[H];
      if constexpr (F::kFifthBit) {
        for (int i = 0; i < H; ++i) {
          qh[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
              fifth + static_cast<size_t>(j) * repacked::NibbleLayout::kFifthBytes + 32 * (h0 + i)));
        }
      }
      __m256i sum[H][T], dot[H][T];
      for (int v = 0; v < 4; ++v) {
        __m256i lo[H], hi[H];
        for (int i = 0; i < H; ++i) {
          const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * v + 32 * (h0 + i)));
          lo[i] = _mm256_and_si256(packed, low4);                        // elements 4v..4v + 3
          hi[i] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);  // elements 16 + 4v..
          if constexpr (F::kFifthBit) {
            lo[i] = _mm256_or_si256(lo[i], FifthBytes(qh[i], v, false));
            hi[i] = _mm256_or_si256(hi[i], FifthBytes(qh[i], v, true));
          }
        }
        for (int k = 0; k < T; ++k) {
          const int8_t* xq = x[k].q8 + j * 32 + 4 * v;
          const __m256i xl = half_tiles::Broadcast4(xq), xh = half_tiles::Broadcast4(xq + 16);
          for (int i = 0; i < H; ++i) {
            const __m256i both = _mm256_add_epi16(_mm256_maddubs_epi16(lo[i], xl), _mm256_maddubs_epi16(hi[i], xh));
            sum[i][k] = v % kVectorsInt16 == 0 ? both : _mm256_add_epi16(sum[i][k], both);
            if (v % kVectorsInt16 == kVectorsInt16 - 1) {
              const __m256i widened = _mm256_madd_epi16(sum[i][k], ones);
              dot[i][k] = v < kVectorsInt16 ? widened : _mm256_add_epi32(dot[i][k], widened);
            }
          }
        }
      }
      for (int i = 0; i < H; ++i) {
        const size_t h = h0 + static_cast<size_t>(i);
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(
            d_half + static_cast<size_t>(j) * repacked::NibbleLayout::kHalfBytes + 16 * h)));
        [[maybe_unused]] __m256 minimum;
        if constexpr (F::kHasMin) {
          minimum = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(
              m_half + static_cast<size_t>(j) * repacked::NibbleLayout::kHalfBytes + 16 * h)));
        }
        for (int k = 0; k < T; ++k) {
          if constexpr (!F::kHasMin) {
            dot[i][k] = _mm256_add_epi32(dot[i][k], _mm256_set1_epi32(x[k].q8_0_offset[j] >> F::kOffsetShift));
          }
          p[i][k] = _mm256_mul_ps(_mm256_cvtepi32_ps(dot[i][k]), _mm256_mul_ps(d, _mm256_set1_ps(x[k].scale[j])));
          if constexpr (F::kHasMin) m[i][k] = _mm256_mul_ps(minimum, _mm256_set1_ps(x[k].scaled_sum[j]));
        }
      }
    };
    int64_t b = 0;
    for (; b + 8 <= n_blocks; b += 8) {  // runs of 8 as trees
      __m256 p[8][H][T], m[8][H][T];
      for (int j = 0; j < 8; ++j) products(b + j, p[j], m[j]);
      for (int i = 0; i < H; ++i) {
        for (int k = 0; k < T; ++k) {
          __m256 run[8], run_min[8];
          for (int j = 0; j < 8; ++j) {
            run[j] = p[j][i][k];
            run_min[j] = m[j][i][k];
          }
          acc[i][k] = _mm256_add_ps(acc[i][k], half_tiles::Tree8(run));
          if constexpr (F::kHasMin) acc_min[i][k] = _mm256_add_ps(acc_min[i][k], half_tiles::Tree8(run_min));
        }
      }
    }
    for (; b < n_blocks; ++b) {  // then one by one
      __m256 p[H][T], m[H][T];
      products(b, p, m);
      for (int i = 0; i < H; ++i) {
        for (int k = 0; k < T; ++k) {
          acc[i][k] = _mm256_add_ps(acc[i][k], p[i][k]);
          if constexpr (F::kHasMin) acc_min[i][k] = _mm256_add_ps(acc_min[i][k], m[i][k]);
        }
      }
    }
    for (int i = 0; i < H; ++i) {
      for (int k = 0; k < T; ++k) out[i * T + k] = F::kHasMin ? _mm256_add_ps(acc[i][k], acc_min[i][k]) : acc[i][k];
    }
  }
};
#endif

// One row of a nibble format dotted with K tokens (the row kernel of its file).
template <class F, int K>
HWY_INLINE void NibbleDots(const uint8_t* row, const TokenQ8* x, int64_t n, float* out) {
#if SQUEEZEKV_X86_BYTE_DOT
  DotNibbleTokens<F, K>(row, x, n, out);
#else
  for (int k = 0; k < K; ++k) out[k] = DotNibbleRow<F>(row, x[k].q, x[k].scale, x[k].scaled_sum, n);
#endif
}

#if SQUEEZEKV_VNNI_TILES
// The nibble formats' panel: each row's block decoded to 32 code bytes (0..15, 0..31 with Q5_0's
// 5th bits) in a small buffer, then regrouped; factor: each row's d; factor_min: each row's m
// (Q4_1).
template <class F>
HWY_INLINE SQUEEZEKV_VNNI void PackNibbleRows(const uint8_t* rows, size_t stride, int valid, int64_t n_blocks,
                                              Panel& panel) {
  panel.bytes.reserve(static_cast<size_t>(n_blocks) * 8);
  panel.factor.reserve(static_cast<size_t>(n_blocks));
  if constexpr (F::kHasMin) panel.factor_min.reserve(static_cast<size_t>(n_blocks));
  size_t offsets[kTileRows], code_offsets[kTileRows];
  RowOffsets(stride, valid, offsets);
  for (int r = 0; r < kTileRows; ++r) code_offsets[r] = static_cast<size_t>(r) * 32;
  HWY_ALIGN uint8_t codes[kTileRows][32];
  for (int64_t j = 0; j < n_blocks; ++j) {
    const uint8_t* block = rows + j * F::kBlockBytes;
    HWY_ALIGN uint16_t d[kTileRows], m[kTileRows];
    for (int r = 0; r < kTileRows; ++r) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(codes[r]), BlockCodes<F>(block + offsets[r]));
      std::memcpy(&d[r], block + offsets[r], 2);
      if constexpr (F::kHasMin) std::memcpy(&m[r], block + offsets[r] + 2, 2);
    }
    TransposeRows(codes[0], code_offsets, panel.bytes.data() + j * 8);
    panel.factor.data()[j] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d)));
    if constexpr (F::kHasMin) {
      panel.factor_min.data()[j] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(m)));
    }
  }
}

// p[k] = float(block j's integer dot with token k, plus the offset -kOffset * (the block sum) for
// the formats without a minimum) * (d * the token's block scale), for the nibble panels.
template <class F, int T>
HWY_INLINE SQUEEZEKV_VNNI void NibbleProducts(const Panel& panel, const TokenQ8* x, int64_t x0, int64_t j, __m512* p) {
  __m512i s[T];
  for (int k = 0; k < T; ++k) {
    s[k] = F::kHasMin ? _mm512_setzero_si512()
                      : _mm512_srai_epi32(Broadcast32(x[k].q8_0_offset + x0 + j), F::kOffsetShift);
  }
  BlockDots<T>(panel.bytes.data() + j * 8, x, (x0 + j) * 32, s);
  const __m512 d = panel.factor.data()[j];
  for (int k = 0; k < T; ++k) {
    p[k] = _mm512_mul_ps(_mm512_cvtepi32_ps(s[k]), _mm512_mul_ps(d, _mm512_set1_ps(x[k].scale[x0 + j])));
  }
}

// The prompt tiles of the nibble formats without a minimum (Q4_0, Q5_0): runs of 8 blocks as
// trees, then the remaining blocks one by one, as their row kernel (a streamed row's panels are
// runs of 8 until the last). The offset term is Q8_0's shifted right (-8 or -16 instead of -128
// times the block sum; exact).
template <class F>
struct OffsetNibbleTiles : PanelView {
  static_assert(!F::kHasMin);
  static constexpr int64_t kUnitCols = 32, kUnitBytes = F::kBlockBytes, kStreamUnits = 16;
  static constexpr int kMaxTokens = 4;
  static_assert(kStreamUnits % 8 == 0, "streamed panels must keep the row kernel's trees");

  static HWY_INLINE SQUEEZEKV_VNNI void pack(const uint8_t* rows, size_t stride, int valid, int64_t n_blocks,
                                             Panel& panel) {
    PackNibbleRows<F>(rows, stride, valid, n_blocks, panel);
  }

  template <int T>
  static HWY_INLINE SQUEEZEKV_VNNI void tile(View panel, int64_t n_blocks, const TokenQ8* x, int64_t x0, __m512* a0,
                                             __m512*) {
    auto product = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA { NibbleProducts<F, T>(*panel, x, x0, j, p); };
    AddBlocksInOrder<T>(product, n_blocks, a0);
  }

  static HWY_INLINE SQUEEZEKV_VNNI __m512 combine(__m512 a0, __m512) { return a0; }
};
#endif  // SQUEEZEKV_VNNI_TILES

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
