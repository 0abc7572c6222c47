// Q4_K weights (super-blocks of 256 elements in 8 sub-blocks of 32: fp16 d and dmin, 6-bit scales
// and mins, nibbles; value = d * scale_s * q - dmin * min_s): the row kernel, the prompt tiles and
// the repacked layout (repacked_weights.h) with its fused tiles. Compiled once per SIMD target
// (foreach_target); the driver (matmul.cc) reaches MatmulRowsQ4_K through the traits table
// (tensor_type.cc).
// clang-format off: the target include must come first, then foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul_q4_k.cc"
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
#include "squeezekv/ops/weight_matrix.h"

#ifndef SQUEEZEKV_OPS_MATMUL_Q4_K_ONCE_
#define SQUEEZEKV_OPS_MATMUL_Q4_K_ONCE_
namespace squeezekv::repacked {
// Q4_K, per 16 rows and super-block: qs (32 vectors), d then dmin (16 fp16 each), scale words.
inline constexpr size_t kQ4_KHalves = 32 * 64, kQ4_KWords = kQ4_KHalves + 64, kQ4_KUnitBytes = kQ4_KWords + 3 * 64;

// Groups [g0, g1) of w's layout by plain copies: the bytes Q4_KRepackedTiles::repack_to writes.
inline void q4_k_repack_groups_by_copies(const WeightMatrix& w, int64_t g0, int64_t g1, uint8_t* out) {
  repack_groups_by_copies(w, g0, g1, out, [](const uint8_t* block, uint8_t* group, size_t b, size_t lane) {
    uint8_t* unit = group + b * kQ4_KUnitBytes;
    for (size_t v = 0; v < 32; ++v) std::memcpy(unit + 64 * v + 4 * lane, block + quant::q4_k_qs_offset + 4 * v, 4);
    std::memcpy(unit + kQ4_KHalves + 2 * lane, block, 2);
    std::memcpy(unit + kQ4_KHalves + 32 + 2 * lane, block + 2, 2);
    for (size_t k = 0; k < 3; ++k) {
      std::memcpy(unit + kQ4_KWords + 64 * k + 4 * lane, block + quant::q4_k_scales_offset + 4 * k, 4);
    }
  });
}
}  // namespace squeezekv::repacked
#endif

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sum of adjacent int16 products widened to int32 (vpmaddwd on x86).
template <class D32, class V16>
HWY_INLINE hn::Vec<D32> PairDot(D32 d32, V16 a, V16 b) {
  auto odd = hn::Zero(d32);
  const auto even = hn::ReorderWidenMulAccumulate(d32, a, b, hn::Zero(d32), odd);
  return hn::RearrangeToOddPlusEven(even, odd);
}

// d * (8 unsigned 6-bit values), one lane per sub-block.
HWY_INLINE hn::Vec<DS> ScaledBytes(hn::Vec<DS> d, const uint8_t* bytes, size_t i) {
  return hn::Mul(d, hn::ConvertTo(DS(), hn::PromoteTo(DSI32(), hn::LoadU(DSU8(), bytes + i))));
}

// Q4_K (value = d * scale_s * q - dmin * min_s) rows dotted with K tokens: a dot is
// sum_s d * scale_s * xs_s * (q . xq)_s minus sum_s dmin * min_s * xs_s * (sum of xq)_s, and the
// second part needs no nibbles at all. Each super-block's nibbles are decoded once and used K
// times; the per-token arithmetic does not depend on K, so every K gives bit-identical results.
#if SQUEEZEKV_X86_BYTE_DOT
// x86: nibbles stay bytes and meet int8 activations in vpmaddubsw (u8 x s8 pairs to int16, at
// most 2 * 15 * 127, so never saturating) and vpmaddwd by 1 (pairs to int32). The 8 sub-blocks'
// int32 vectors are then reduced together into one vector, lane s = sub-block s, so a super-block
// costs one conversion and one FMA per token against its 8-lane factor vector, with no broadcasts.

template <int K>
HWY_INLINE void DotQ4_K(const uint8_t* row, const TokenQ8* x, int64_t n, float* out) {
  static_assert(hn::MaxLanes(DS()) == 8, "one 256-bit vector per sub-block set");
  const DS ds;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  float acc[K] = {}, acc_min[K] = {};  // the two terms in separate sums
  for (int64_t b = 0; b < n / quant::q4_k_elems; ++b) {
    const uint8_t* block = row + b * quant::q4_k_bytes;
    prefetch_ahead(block, quant::q4_k_bytes);
    uint8_t scale[8], min[8];
    quant::q4_k_unpack_scales(block + quant::q4_k_scales_offset, scale, min);
    const auto d_scale = ScaledBytes(hn::Set(ds, LoadHalf(block)), scale, 0);
    const auto d_min = ScaledBytes(hn::Set(ds, LoadHalf(block + 2)), min, 0);
    const uint8_t* qs = block + quant::q4_k_qs_offset;
    __m256i nibbles[8];  // sub-block s: group s / 2, low (even s) or high (odd s) nibbles
    for (int g = 0; g < 4; ++g) {
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * g));
      nibbles[2 * g] = _mm256_and_si256(packed, low4);
      nibbles[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);
    }
    for (int k = 0; k < K; ++k) {
      const int8_t* xk = x[k].q8 + b * quant::q4_k_elems;
      __m256i dots[8];
      for (int s = 0; s < 8; ++s) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xk + 32 * s));
        dots[s] = ByteDot(nibbles[s], xv);
      }
      const auto sums = hn::Vec<DS>{_mm256_cvtepi32_ps(SumEachOf8(dots))};
      acc[k] += TreeSum8(hn::Mul(sums, hn::Mul(d_scale, hn::LoadU(ds, x[k].scale + b * 8))));
      acc_min[k] += TreeSum8(hn::Mul(d_min, hn::LoadU(ds, x[k].scaled_sum + b * 8)));
    }
  }
  for (int k = 0; k < K; ++k) out[k] = acc[k] - acc_min[k];
}

// The half-group tiles over the repacked layout (matmul_half_tiles-inl.h): a sub-block's 8
// vpmaddubsw add up in int16 (at most 8 * 2 * 15 * 128 = 30720, no overflow) before one vpmaddwd;
// the integer sums are exact in any order and the float products and their tree are DotQ4_K's,
// lane by lane, so the bits are the row kernel's.
struct Q4_KHalfTiles {
  static constexpr int64_t kUnitCols = quant::q4_k_elems;

  // d * scale and dmin * min of the 8 sub-blocks of one super-block for half h's 8 rows, as
  // q4_k_unpack_scales and ScaledBytes compute them (the bytes of scales 0-3, 4-7, mins 0-3, 4-7
  // decoded in every lane's three scale words at once). Q4_KRepackedTiles::factors is the same in
  // 512-bit registers; one width-generic version in Highway ops made the 512-bit tiles 2-5 %
  // slower (`ops_bench --benchmark_filter='^matmul/Q4_K/(2048x2048|8192x2048)/repacked/tokens:(1|128)/threads:1'`),
  // so each width keeps its own.
  static HWY_INLINE void Factors(const uint8_t* unit, size_t h, __m256* factor, __m256* factor_min) {
    const uint8_t* halves = unit + repacked::kQ4_KHalves + 16 * h;
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(halves)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(halves + 32)));
    const uint8_t* w = unit + repacked::kQ4_KWords + 32 * h;
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64));
    const __m256i w2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 128));
    const __m256i low6 = _mm256_set1_epi32(0x3f3f3f3f), low4 = _mm256_set1_epi32(0x0f0f0f0f),
                  low2 = _mm256_set1_epi32(0x03030303), byte = _mm256_set1_epi32(0xff);
    const __m256i words[4] = {_mm256_and_si256(w0, low6),
                              _mm256_or_si256(_mm256_and_si256(w2, low4),
                                              _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w0, 6), low2), 4)),
                              _mm256_and_si256(w1, low6),
                              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), low4),
                                              _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w1, 6), low2), 4))};
    for (int sub = 0; sub < 8; ++sub) {
      const int shift = 8 * (sub % 4);
      const __m256i scale = _mm256_and_si256(_mm256_srli_epi32(words[sub / 4], shift), byte);
      const __m256i min = _mm256_and_si256(_mm256_srli_epi32(words[2 + sub / 4], shift), byte);
      factor[sub] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(scale));
      factor_min[sub] = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(min));
    }
  }

  // The dots of H halves' rows (from half h0 on) with T tokens over n_super super-blocks from
  // a group's units: out[i * T + k] lane r = row r of half h0 + i with token k.
  template <int T, int H>
  static HWY_INLINE void Tile(const uint8_t* units, int64_t n_super, size_t h0, const TokenQ8* x, __m256* out) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    __m256 acc[H][T], acc_min[H][T];
    for (int i = 0; i < H; ++i) {
      for (int k = 0; k < T; ++k) acc[i][k] = acc_min[i][k] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < n_super; ++b) {
      const uint8_t* unit = units + b * repacked::kQ4_KUnitBytes;
      if constexpr (T == 1) prefetch_ahead(unit, repacked::kQ4_KUnitBytes, half_tiles::kOneTokenAheadBytes);
      __m256 factor[H][8], factor_min[H][8];
      for (int i = 0; i < H; ++i) Factors(unit, h0 + i, factor[i], factor_min[i]);
      __m256i dots[H][8][T];  // per half, sub-block and token, lane r: row r's integer dot
      for (int pair = 0; pair < 4; ++pair) {
        __m256i lo[H][T], hi[H][T];  // int16 sums of sub-blocks 2 * pair (low nibbles) and 2 * pair + 1
        for (int g = 0; g < 8; ++g) {
          __m256i nl[H], nh[H];
          for (int i = 0; i < H; ++i) {
            const __m256i v =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + 64 * (pair * 8 + g) + 32 * (h0 + i)));
            nl[i] = _mm256_and_si256(v, low4);
            nh[i] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
          }
          for (int k = 0; k < T; ++k) {
            const int8_t* xq = x[k].q8 + b * quant::q4_k_elems + 64 * pair + 4 * g;
            const __m256i xl = half_tiles::Broadcast4(xq), xh = half_tiles::Broadcast4(xq + 32);
            for (int i = 0; i < H; ++i) {
              const __m256i pl = _mm256_maddubs_epi16(nl[i], xl), ph = _mm256_maddubs_epi16(nh[i], xh);
              lo[i][k] = g == 0 ? pl : _mm256_add_epi16(lo[i][k], pl);
              hi[i][k] = g == 0 ? ph : _mm256_add_epi16(hi[i][k], ph);
            }
          }
        }
        for (int i = 0; i < H; ++i) {
          for (int k = 0; k < T; ++k) {
            dots[i][2 * pair][k] = _mm256_madd_epi16(lo[i][k], ones);
            dots[i][2 * pair + 1][k] = _mm256_madd_epi16(hi[i][k], ones);
          }
        }
      }
      for (int i = 0; i < H; ++i) {
        for (int k = 0; k < T; ++k) {
          __m256 p[8], m[8];
          for (int j = 0; j < 8; ++j) {
            p[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(dots[i][j][k]),
                                 _mm256_mul_ps(factor[i][j], _mm256_set1_ps(x[k].scale[b * 8 + j])));
            m[j] = _mm256_mul_ps(factor_min[i][j], _mm256_set1_ps(x[k].scaled_sum[b * 8 + j]));
          }
          acc[i][k] = _mm256_add_ps(acc[i][k], half_tiles::Tree8(p));
          acc_min[i][k] = _mm256_add_ps(acc_min[i][k], half_tiles::Tree8(m));
        }
      }
    }
    for (int i = 0; i < H; ++i) {
      for (int k = 0; k < T; ++k) out[i * T + k] = _mm256_sub_ps(acc[i][k], acc_min[i][k]);
    }
  }
};
#else
// Elsewhere: nibbles and activations widened to int16 (32 lanes decode a group per load on
// 512-bit vectors; narrower ones loop).
using DG16 = hn::CappedTag<int16_t, 32>;
using DQ4 = hn::Repartition<float, DG16>;

template <int K>
HWY_INLINE void Q4_KGroup(const uint8_t* qs, const int16_t* const* x16, const float (*factor)[8], int sub,
                          hn::Vec<DQ4>* acc_lo, hn::Vec<DQ4>* acc_hi) {
  const DG16 d16;
  const hn::Repartition<int32_t, DG16> d32;
  const DQ4 df;
  const auto low_mask = hn::Set(d16, 0xf);
  for (size_t j = 0; j < 32; j += hn::Lanes(d16)) {
    const auto packed =
        hn::BitCast(d16, hn::PromoteTo(hn::RebindToUnsigned<DG16>(), hn::LoadU(hn::Rebind<uint8_t, DG16>(), qs + j)));
    const auto lo = hn::And(packed, low_mask);
    const auto hi = hn::ShiftRight<4>(packed);
    for (int k = 0; k < K; ++k) {
      acc_lo[k] = hn::MulAdd(hn::ConvertTo(df, PairDot(d32, lo, hn::LoadU(d16, x16[k] + j))),
                             hn::Set(df, factor[k][sub]), acc_lo[k]);
      acc_hi[k] = hn::MulAdd(hn::ConvertTo(df, PairDot(d32, hi, hn::LoadU(d16, x16[k] + 32 + j))),
                             hn::Set(df, factor[k][sub + 1]), acc_hi[k]);
    }
  }
}

template <int K>
HWY_INLINE void DotQ4_K(const uint8_t* row, const TokenQ8* x, int64_t n, float* out) {
  const DQ4 df;
  const DS ds;
  const size_t sub_lanes = hn::Lanes(ds);
  hn::Vec<DQ4> acc_lo[K], acc_hi[K];  // two FMA chains per token
  hn::Vec<DS> acc_min[K];             // the mins term, one lane per sub-block
  for (int k = 0; k < K; ++k) {
    acc_lo[k] = acc_hi[k] = hn::Zero(df);
    acc_min[k] = hn::Zero(ds);
  }
  HWY_ALIGN float factor[K][8];  // d * scale_s * xs_s per token and sub-block
  for (int64_t b = 0; b < n / quant::q4_k_elems; ++b) {
    const uint8_t* block = row + b * quant::q4_k_bytes;
    const auto d = hn::Set(ds, LoadHalf(block));
    const auto dmin = hn::Set(ds, LoadHalf(block + 2));
    uint8_t scale[8], min[8];
    quant::q4_k_unpack_scales(block + quant::q4_k_scales_offset, scale, min);
    for (size_t i = 0; i < 8; i += sub_lanes) {
      const auto d_scale = ScaledBytes(d, scale, i);
      const auto d_min = ScaledBytes(dmin, min, i);
      for (int k = 0; k < K; ++k) {
        const int64_t xb = b * 8 + static_cast<int64_t>(i);
        hn::Store(hn::Mul(d_scale, hn::LoadU(ds, x[k].scale + xb)), ds, factor[k] + i);
        acc_min[k] = hn::MulAdd(d_min, hn::LoadU(ds, x[k].scaled_sum + xb), acc_min[k]);
      }
    }
    const uint8_t* qs = block + quant::q4_k_qs_offset;
    for (int g = 0; g < 4; ++g) {
      const int16_t* x16[K];
      for (int k = 0; k < K; ++k) x16[k] = x[k].q + b * quant::q4_k_elems + 64 * g;
      Q4_KGroup<K>(qs + 32 * g, x16, factor, 2 * g, acc_lo, acc_hi);
    }
  }
  for (int k = 0; k < K; ++k) {
    out[k] =
        hn::GetLane(hn::SumOfLanes(df, hn::Add(acc_lo[k], acc_hi[k]))) - hn::GetLane(hn::SumOfLanes(ds, acc_min[k]));
  }
}
#endif

#if SQUEEZEKV_VNNI_TILES
struct Q4_KTiles : PanelView {
  static constexpr int64_t kUnitCols = quant::q4_k_elems, kUnitBytes = quant::q4_k_bytes, kStreamUnits = 2;
  static constexpr int kMaxTokens = 4;

  // The low (sub-block 2p) or high (sub-block 2p + 1) nibbles of a packed vector, one per byte.
  static HWY_INLINE SQUEEZEKV_VNNI __m512i Nibbles(__m512i v, bool high) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    return _mm512_and_si512(high ? _mm512_srli_epi16(v, 4) : v, low4);
  }

  // 8 vectors of a pair of sub-blocks' regrouped qs bytes into the panel's 16: the low nibbles
  // (the first sub-block), then the high ones.
  static HWY_INLINE SQUEEZEKV_VNNI void SplitNibbles(const __m512i* packed, __m512i* out) {
    for (int g = 0; g < 8; ++g) {
      const __m512i v = _mm512_load_si512(packed + g);
      out[g] = Nibbles(v, false);
      out[8 + g] = Nibbles(v, true);
    }
  }

  // Q4_K nibbles are unsigned already; the panel holds them one per byte. Its factors are computed
  // as the row kernel computes them (d times the 6-bit value, each rounded once).
  static HWY_INLINE SQUEEZEKV_VNNI void pack(const uint8_t* rows, size_t stride, int valid, int64_t n_super,
                                             Panel& panel) {
    panel.bytes.reserve(static_cast<size_t>(n_super) * 64);
    panel.factor.reserve(static_cast<size_t>(n_super) * 8);
    panel.factor_min.reserve(static_cast<size_t>(n_super) * 8);
    size_t offsets[kTileRows];
    RowOffsets(stride, valid, offsets);
    for (int64_t b = 0; b < n_super; ++b) {
      const uint8_t* block = rows + b * quant::q4_k_bytes;
      __m512i* out = panel.bytes.data() + b * 64;
      for (int pair = 0; pair < 4; ++pair) {  // 32 bytes: sub-block 2 * pair low, 2 * pair + 1 high
        __m512i packed[8];
        TransposeRows(block + quant::q4_k_qs_offset + 32 * pair, offsets, packed);
        SplitNibbles(packed, out + pair * 16);
      }
      HWY_ALIGN float factor[8][kTileRows], factor_min[8][kTileRows];
      for (int r = 0; r < kTileRows; ++r) {
        const uint8_t* row_block = block + offsets[r];
        const float d = LoadHalf(row_block), dmin = LoadHalf(row_block + 2);
        uint8_t scale[8], min[8];
        quant::q4_k_unpack_scales(row_block + quant::q4_k_scales_offset, scale, min);
        for (int s = 0; s < 8; ++s) {
          factor[s][r] = d * static_cast<float>(scale[s]);
          factor_min[s][r] = dmin * static_cast<float>(min[s]);
        }
      }
      for (int s = 0; s < 8; ++s) {
        panel.factor.data()[b * 8 + s] = _mm512_load_ps(factor[s]);
        panel.factor_min.data()[b * 8 + s] = _mm512_load_ps(factor_min[s]);
      }
    }
  }

  // Q4_K: the scales' term into a0, the mins' into a1 (the dot is a0 - a1).
  template <int T>
  static HWY_INLINE SQUEEZEKV_VNNI void tile(View panel, int64_t n_super, const TokenQ8* x, int64_t x0, __m512* a0,
                                             __m512* a1) {
    const auto* const bytes_ptr = panel->bytes.data();
    const auto* const factor_ptr = panel->factor.data();
    const auto* const factor_min_ptr = panel->factor_min.data();
    auto product = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA {
      __m512i s[T];
      for (int k = 0; k < T; ++k) s[k] = _mm512_setzero_si512();
      BlockDots<T>(bytes_ptr + j * 8, x, (x0 + j) * 32, s);
      const __m512 factor = factor_ptr[j];
      for (int k = 0; k < T; ++k) {
        p[k] = _mm512_mul_ps(_mm512_cvtepi32_ps(s[k]), _mm512_mul_ps(factor, _mm512_set1_ps(x[k].scale[x0 + j])));
      }
    };
    // The mins' term needs no weight bytes: its own pass, so that each pass holds few registers.
    auto min_product = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA {
      const __m512 factor_min = factor_min_ptr[j];
      for (int k = 0; k < T; ++k) p[k] = _mm512_mul_ps(factor_min, _mm512_set1_ps(x[k].scaled_sum[x0 + j]));
    };
    const int64_t n_sub = n_super * 8;
    for (int64_t j = 0; j < n_sub; j += 8) AddTreeOf8<T>(product, j, a0);
    for (int64_t j = 0; j < n_sub; j += 8) AddTreeOf8<T>(min_product, j, a1);
  }

  static HWY_INLINE SQUEEZEKV_VNNI __m512 combine(__m512 a0, __m512 a1) { return _mm512_sub_ps(a0, a1); }
};

// Repacked Q4_K (repacked_weights.h), per super-block of 16 rows: its 128 qs bytes regrouped as
// the panel regroups them but still two nibbles a byte (32 vectors: per pair of sub-blocks, 8),
// the rows' d and dmin (16 fp16 each), then the 12 packed scale bytes as 3 dwords (3 vectors, lane
// = row): 2304 bytes, the 16 rows' own 16 x 144. Its tile reads the matrix itself: the nibbles are
// split and the 6-bit scales and mins decoded in registers, 16 rows at a time, with no panel (on
// Zen 4 a 512-bit store costs two cycles: writing the split bytes to a panel cost more than the
// products for one token). The arithmetic and its order are Q4_KTiles'.
struct Q4_KRepackedTiles {
  static constexpr int64_t kUnitCols = quant::q4_k_elems, kUnitBytes = repacked::kQ4_KUnitBytes;
  static constexpr int kMaxTokens = 4;
  static constexpr int64_t kRepackedStreamUnits = 2;
  using View = const uint8_t*;

  static HWY_INLINE SQUEEZEKV_VNNI void repack_to(const uint8_t* rows, size_t stride, int valid, int64_t n_super,
                                                  uint8_t* group) {
    size_t offsets[kTileRows];
    RowOffsets(stride, valid, offsets);
    for (int64_t b = 0; b < n_super; ++b) {
      const uint8_t* block = rows + b * quant::q4_k_bytes;
      uint8_t* out = group + b * kUnitBytes;
      for (int pair = 0; pair < 4; ++pair) {
        TransposeRows(block + quant::q4_k_qs_offset + 32 * pair, offsets, reinterpret_cast<__m512i*>(out) + pair * 8);
      }
      auto* halves = reinterpret_cast<uint16_t*>(out + repacked::kQ4_KHalves);
      auto* words = reinterpret_cast<uint32_t*>(out + repacked::kQ4_KWords);
      for (int r = 0; r < kTileRows; ++r) {
        std::memcpy(&halves[r], block + offsets[r], 2);
        std::memcpy(&halves[kTileRows + r], block + offsets[r] + 2, 2);
        for (int k = 0; k < 3; ++k) {
          std::memcpy(&words[k * kTileRows + r], block + offsets[r] + quant::q4_k_scales_offset + 4 * k, 4);
        }
      }
    }
  }

  // A super-block's d * scale and dmin * min per sub-block, 16 rows each: q4_k_unpack_scales on
  // the rows' words at once, then the products Q4_KTiles::pack computes (each rounded once).
  static HWY_INLINE SQUEEZEKV_VNNI void factors(const uint8_t* unit, __m512* factor, __m512* factor_min) {
    const auto* halves = reinterpret_cast<const __m256i*>(unit + repacked::kQ4_KHalves);
    const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(halves)), dmin = _mm512_cvtph_ps(_mm256_load_si256(halves + 1));
    const auto* w = reinterpret_cast<const __m512i*>(unit + repacked::kQ4_KWords);
    const __m512i w0 = _mm512_load_si512(w), w1 = _mm512_load_si512(w + 1), w2 = _mm512_load_si512(w + 2);
    const __m512i low6 = _mm512_set1_epi32(0x3f3f3f3f), low4 = _mm512_set1_epi32(0x0f0f0f0f),
                  low2 = _mm512_set1_epi32(0x03030303), byte = _mm512_set1_epi32(0xff);
    const __m512i words[4] = {// the bytes of scales 0-3, scales 4-7, mins 0-3, mins 4-7
                              _mm512_and_si512(w0, low6),
                              _mm512_or_si512(_mm512_and_si512(w2, low4),
                                              _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w0, 6), low2), 4)),
                              _mm512_and_si512(w1, low6),
                              _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), low4),
                                              _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w1, 6), low2), 4))};
    for (int sub = 0; sub < 8; ++sub) {
      const int shift = 8 * (sub % 4);
      const __m512i scale = _mm512_and_si512(_mm512_srli_epi32(words[sub / 4], shift), byte);
      const __m512i min = _mm512_and_si512(_mm512_srli_epi32(words[2 + sub / 4], shift), byte);
      factor[sub] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(scale));
      factor_min[sub] = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(min));
    }
  }

  template <int T>
  static HWY_INLINE SQUEEZEKV_VNNI void tile(View units, int64_t n_super, const TokenQ8* x, int64_t x0, __m512* a0,
                                             __m512* a1) {
    for (int64_t b = 0; b < n_super; ++b) {
      const uint8_t* unit = units + b * kUnitBytes;
      __m512 factor[8], factor_min[8];
      factors(unit, factor, factor_min);
      const auto* packed = reinterpret_cast<const __m512i*>(unit);
      const int64_t first = x0 + b * 8;  // the activation block of sub-block 0
      // A sub-block's product: its dot (as a float) times d * scale times the token's block scale.
      auto scaled = [&](__m512 dot, int64_t j, int k) SQUEEZEKV_VNNI_LAMBDA {
        return _mm512_mul_ps(dot, _mm512_mul_ps(factor[j], _mm512_set1_ps(x[k].scale[first + j])));
      };
      if constexpr (T == 1) {
        // One token (a decode step): each packed vector is loaded once and feeds both of its
        // sub-blocks, where the general tile loads it once per nibble. Integer sums are exact in
        // any order, and the products and their tree are the general tile's, so the bits are too.
        // Unrolled so that the 8 accumulators stay in registers.
        __m512i s[8];
        for (int j = 0; j < 8; ++j) s[j] = _mm512_setzero_si512();
        const int8_t* xq = x[0].q8 + first * 32;
        const __m512i high4 = _mm512_set1_epi8(static_cast<char>(0xf0));
#pragma GCC unroll 4
        for (int pair = 0; pair < 4; ++pair) {
#pragma GCC unroll 8
          for (int g = 0; g < 8; ++g) {
            const __m512i v = _mm512_load_si512(packed + pair * 8 + g);
            s[2 * pair] = DotBroadcast<1>(s[2 * pair], Q4_KTiles::Nibbles(v, false), xq + 64 * pair + 4 * g);
            s[2 * pair + 1] = DotBroadcast<1>(s[2 * pair + 1], _mm512_and_si512(v, high4), xq + 64 * pair + 32 + 4 * g);
          }
        }
        // The high nibbles are used in place (v & 0xf0, a shift fewer per vector: the tile is bound
        // by its arithmetic when memory is fast), so their dots are 16 times the true ones: exact
        // in int32 and in float (|dot| <= 240 * 128 * 32 < 2^24), and a sixteenth of that float is
        // the true dot exactly. Same bits as the shifted nibbles.
        AddTreeOf8<1>(
            [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA {
              const __m512 dot = _mm512_cvtepi32_ps(s[j]);
              p[0] = scaled(j % 2 == 0 ? dot : _mm512_mul_ps(dot, _mm512_set1_ps(1.0f / 16)), j, 0);
            },
            0, a0);
      } else {
        auto product = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA {
          __m512i s[T];
          for (int k = 0; k < T; ++k) s[k] = _mm512_setzero_si512();
          const int64_t column = (first + j) * 32;
          for (int g = 0; g < 8; ++g) {
            const __m512i wg = Q4_KTiles::Nibbles(_mm512_load_si512(packed + (j / 2) * 8 + g), (j & 1) != 0);
            for (int k = 0; k < T; ++k) s[k] = DotBroadcast<T>(s[k], wg, x[k].q8 + column + 4 * g);
          }
          for (int k = 0; k < T; ++k) p[k] = scaled(_mm512_cvtepi32_ps(s[k]), j, k);
        };
        AddTreeOf8<T>(product, 0, a0);
      }
      auto min_product = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA {
        for (int k = 0; k < T; ++k) p[k] = _mm512_mul_ps(factor_min[j], _mm512_set1_ps(x[k].scaled_sum[first + j]));
      };
      AddTreeOf8<T>(min_product, 0, a1);
    }
  }

  static HWY_INLINE SQUEEZEKV_VNNI __m512 combine(__m512 a0, __m512 a1) { return _mm512_sub_ps(a0, a1); }

  static HWY_INLINE View repacked_view(const uint8_t* group, int64_t, int64_t u0, int64_t, Panel&) {
    return group + u0 * kUnitBytes;
  }

  // Calls of more than 16 tokens unpack the 16 rows once into Q4_KTiles' panel (its nibbles split,
  // its factors decoded) and run its tiles: the unpacking is then shared by every token, where the
  // fused tile would redo it for every 4.
  using WholeKind = Q4_KTiles;
  static HWY_INLINE SQUEEZEKV_VNNI const Panel* whole_view(const uint8_t* group, int64_t n_super, Panel& panel) {
    panel.bytes.reserve(static_cast<size_t>(n_super) * 64);
    panel.factor.reserve(static_cast<size_t>(n_super) * 8);
    panel.factor_min.reserve(static_cast<size_t>(n_super) * 8);
    for (int64_t b = 0; b < n_super; ++b) {
      const uint8_t* unit = group + b * kUnitBytes;
      const auto* packed = reinterpret_cast<const __m512i*>(unit);
      __m512i* out = panel.bytes.data() + b * 64;
      for (int pair = 0; pair < 4; ++pair) Q4_KTiles::SplitNibbles(packed + pair * 8, out + pair * 16);
      factors(unit, panel.factor.data() + b * 8, panel.factor_min.data() + b * 8);
    }
    return &panel;
  }
  static HWY_INLINE void repacked_prefetch(const uint8_t* group, int64_t, int64_t u0, int64_t u1) {
    for (int64_t b = u0 * kUnitBytes; b < u1 * kUnitBytes; b += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(group) + b, _MM_HINT_T1);
    }
  }
};
#endif  // SQUEEZEKV_VNNI_TILES

struct Q4_KRows {
  template <int K>
  static HWY_INLINE void Dots(const uint8_t* row, const TokenQ8* x, int64_t n, float* out) {
    DotQ4_K<K>(row, x, n, out);
  }
};

// Rows [row_begin, row_end) of w times every token of the call.
void MatmulRowsQ4_K(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end,
                    float* HWY_RESTRICT y) {
#if SQUEEZEKV_VNNI_TILES
  if (w.repacked != nullptr && HasVnni()) return RepackedRows<Q4_KRepackedTiles>(w, in, row_begin, row_end, y);
  if (UseTiles(in.n_tok, kTileMinTokens)) return TiledRows<Q4_KTiles>(w, in, row_begin, row_end, y);
#endif
#if SQUEEZEKV_X86_BYTE_DOT
  if (w.repacked != nullptr) return HalfTileRows<Q4_KHalfTiles>(w, in, row_begin, row_end, y);
#endif
  QuantizedRows<Q4_KRows>(w, in, row_begin, row_end, y);
}

// Groups [group_begin, group_end) of w's repacked layout into out (repack_groups checks that
// this target can: can_repack).
void RepackGroupsQ4_K(const WeightMatrix& w, int64_t group_begin, int64_t group_end, uint8_t* out) {
#if SQUEEZEKV_VNNI_TILES
  if (HasVnni()) return RepackGroupsOf<Q4_KRepackedTiles>(w, group_begin, group_end, out);
#endif
  repacked::q4_k_repack_groups_by_copies(w, group_begin, group_end, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(MatmulRowsQ4_K);
HWY_EXPORT(RepackGroupsQ4_K);

namespace {

void rows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end, float* y) {
  HWY_DYNAMIC_DISPATCH(MatmulRowsQ4_K)(w, in, row_begin, row_end, y);
}

void repack_groups(const WeightMatrix& w, int64_t group_begin, int64_t group_end, uint8_t* out) {
  HWY_DYNAMIC_DISPATCH(RepackGroupsQ4_K)(w, group_begin, group_end, out);
}

// Super-block j of row `lane` of a repacked group, as GGUF stores it (144 bytes).
void read_unit(const uint8_t* group, int64_t /*n_super*/, int64_t j, size_t lane, uint8_t* block) {
  using namespace repacked;
  const uint8_t* unit = group + static_cast<size_t>(j) * kQ4_KUnitBytes;
  std::memcpy(block, unit + kQ4_KHalves + 2 * lane, 2);
  std::memcpy(block + 2, unit + kQ4_KHalves + 32 + 2 * lane, 2);
  for (size_t k = 0; k < 3; ++k)
    std::memcpy(block + quant::q4_k_scales_offset + 4 * k, unit + kQ4_KWords + k * 64 + 4 * lane, 4);
  for (size_t i = 0; i < 128; ++i) block[quant::q4_k_qs_offset + i] = unit[(i / 4) * 64 + 4 * lane + i % 4];
}

constexpr detail::RepackedLayout kRepacked{repack_groups, read_unit};

}  // namespace

extern const detail::WeightKernels q4_k_kernels;
const detail::WeightKernels q4_k_kernels{rows, &kRepacked};

}  // namespace squeezekv
#endif  // HWY_ONCE
