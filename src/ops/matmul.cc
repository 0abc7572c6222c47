// matvec/matmul with Highway: this file is compiled once per SIMD target (foreach_target) and
// the best target is picked at run time (HWY_DYNAMIC_DISPATCH). Weight rows are decoded block by
// block inside the dot product, never dequantised into a copy.
// clang-format off: the target include must come first, then foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

#include <algorithm>
#include <cstring>

#include "hwy/aligned_allocator.h"
#include "ops/activation_q8.h"
#include "ops/quant_formats.h"
#include "ops/repacked_layout.h"
#include "ops/stream_prefetch.h"
#include "squeezekv/ops/matmul.h"
#include "squeezekv/ops/repacked_weights.h"
#include "squeezekv/ops/tensor_type.h"

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
// Integer kernels work on at most 16 int16 lanes (half a 32-element block), which keeps the
// nibble layouts simple on every target; on AVX-512 they run on 256-bit vectors.
using D16 = hn::CappedTag<int16_t, 16>;
using D32 = hn::Repartition<int32_t, D16>;
using DW = hn::Repartition<float, D16>;
using DU16 = hn::RebindToUnsigned<D16>;
using DU8 = hn::Rebind<uint8_t, D16>;
using DI8 = hn::Rebind<int8_t, D16>;

// One fp16 value (block scales), using the target's conversion instruction where it has one.
HWY_INLINE float LoadHalf(const uint8_t* p) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, hn::CappedTag<float, 1>> dh1;
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(p))));
}

// Loads 16 bytes (or fewer on narrow targets) of packed values widened to int16.
HWY_INLINE hn::Vec<D16> LoadBytes(const uint8_t* p) {
  return hn::BitCast(D16(), hn::PromoteTo(DU16(), hn::LoadU(DU8(), p)));
}

HWY_INLINE float Sum(hn::Vec<DW> v) { return hn::GetLane(hn::SumOfLanes(DW(), v)); }

// ------------------------------ float weights

// Dot of n weights loaded by load(i) (as f32 vectors of DF) with x; 4 accumulators hide FMA latency.
template <class LoadW, class ScalarW>
HWY_INLINE float DotFloat(const float* HWY_RESTRICT x, int64_t n, LoadW load, ScalarW scalar) {
  const DF df;
  const auto lanes = static_cast<int64_t>(hn::Lanes(df));
  auto s0 = hn::Zero(df), s1 = hn::Zero(df), s2 = hn::Zero(df), s3 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    s0 = hn::MulAdd(load(i), hn::LoadU(df, x + i), s0);
    s1 = hn::MulAdd(load(i + lanes), hn::LoadU(df, x + i + lanes), s1);
    s2 = hn::MulAdd(load(i + 2 * lanes), hn::LoadU(df, x + i + 2 * lanes), s2);
    s3 = hn::MulAdd(load(i + 3 * lanes), hn::LoadU(df, x + i + 3 * lanes), s3);
  }
  for (; i + lanes <= n; i += lanes) s0 = hn::MulAdd(load(i), hn::LoadU(df, x + i), s0);
  float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  for (; i < n; ++i) sum += scalar(i) * x[i];
  return sum;
}

HWY_INLINE float DotF32(const uint8_t* row, const float* x, int64_t n) {
  const DF df;
  const auto* w = reinterpret_cast<const float*>(row);
  return DotFloat(
      x, n, [&](int64_t i) { return hn::LoadU(df, w + i); }, [&](int64_t i) { return w[i]; });
}

template <typename T>
HWY_INLINE float DotHalf(const uint8_t* row, const float* x, int64_t n) {
  const DF df;
  const hn::Rebind<T, DF> dh;
  const auto* w = reinterpret_cast<const T*>(row);
  return DotFloat(
      x, n, [&](int64_t i) { return hn::PromoteTo(df, hn::LoadU(dh, w + i)); },
      [&](int64_t i) {  // tail: a 1-lane load, so nothing past the row is read
        const hn::CappedTag<float, 1> d1;
        return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(hn::Rebind<T, decltype(d1)>(), w + i)));
      });
}

// ------------------------------ quantised weights (integer dots with quantised x)

// x86 targets with 256-bit integer ops multiply weight bytes by int8 activations directly
// (vpmaddubsw), which Highway 1.0 has no op for; the others widen both sides to int16.
#undef SQUEEZEKV_X86_BYTE_DOT
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define SQUEEZEKV_X86_BYTE_DOT 1
#else
#define SQUEEZEKV_X86_BYTE_DOT 0
#endif

// One token's quantised activations, as the multi-token kernels see them.
struct TokenQ8 {
  const int16_t* q;
  const int8_t* q8;
  const float* scale;
  const float* scaled_sum;
  const int32_t* q8_0_offset;
  const int32_t* q6_k_offset;
};

HWY_INLINE TokenQ8 token_q8(const detail::QuantizedActivations& xq, int64_t t, int64_t n) {
  const int64_t blocks = n / detail::activation_block;
  return {xq.q.data() + t * n, xq.q8.data() + t * n, xq.scale.data() + t * blocks,
          xq.scaled_sum.data() + t * blocks, xq.q8_0_offset.data() + t * blocks,
          xq.q6_k_offset.data() + 2 * t * blocks};
}

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

// The formats of 16 bytes of nibbles a block (low nibbles elements 0-15, high 16-31): Q4_0
// (value = d * (q - 8)), Q4_1 (value = d * q + m) and Q5_0 (value = d * (q - 16), whose 5th bits
// come from the 32-bit qh before the nibbles).
static_assert(quant::q4_0_elems == 32 && quant::q4_1_elems == 32 && quant::q5_0_elems == 32);

template <TensorType kType>
struct NibbleFormat {
  static_assert(kType == TensorType::q4_0 || kType == TensorType::q4_1 || kType == TensorType::q5_0);
  static constexpr bool kHasMin = kType == TensorType::q4_1;
  static constexpr bool kFifthBit = kType == TensorType::q5_0;
  static constexpr int64_t kBlockBytes =
      kHasMin ? quant::q4_1_bytes : (kFifthBit ? quant::q5_0_bytes : quant::q4_0_bytes);
  static constexpr int64_t kCodesOffset = kHasMin ? quant::q4_1_qs_offset : (kFifthBit ? quant::q5_0_qs_offset : 2);
  static constexpr int16_t kOffset = kFifthBit ? 16 : 8;  // subtracted from the codes (no-min formats)
  // The activations' q8_0_offset (-128 * the block's sum of xq) >> kOffsetShift = -kOffset * that sum.
  static constexpr int kOffsetShift = kFifthBit ? 3 : 4;
};

// Q5_0's 5th bits, the 32-bit qh of a block (element j's is bit j).
HWY_INLINE uint32_t LoadFifthBits(const uint8_t* block) {
  uint32_t qh;
  std::memcpy(&qh, block + quant::q5_0_qh_offset, sizeof qh);
  return qh;
}

// Nibble rows on int16 lanes. Q4_1's minimum adds m * xs * (sum of xq) per block, the scaled sum
// the activations carry, summed apart from the code term and added at the end.
template <TensorType kType>
HWY_INLINE float DotNibbleRow(const uint8_t* row, const int16_t* xq, const float* xs, const float* x_sum, int64_t n) {
  using F = NibbleFormat<kType>;
  const D16 d16;
  const D32 d32;
  const DW dw;
  const size_t lanes = hn::Lanes(d16);
  const auto low_mask = hn::Set(d16, 0xf);
  const auto offset = hn::Set(d16, F::kOffset);
  // Lane i of the vector for elements j.. tests bit j + i of a half of qh.
  alignas(64) static constexpr int16_t kBits[16] = {1,     2,     4,     8,      16,     32,     64,    128,
                                                    256,   512,   1024,  2048,   4096,   8192,   16384, -32768};
  auto acc = hn::Zero(dw);
  float acc_min = 0.0f;
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* block = row + b * F::kBlockBytes;
    const int16_t* qx = xq + b * 32;
    [[maybe_unused]] uint32_t qh = 0;
    if constexpr (F::kFifthBit) qh = LoadFifthBits(block);
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

// Sum of adjacent int16 products widened to int32 (vpmaddwd on x86).
template <class D32, class V16>
HWY_INLINE hn::Vec<D32> PairDot(D32 d32, V16 a, V16 b) {
  auto odd = hn::Zero(d32);
  const auto even = hn::ReorderWidenMulAccumulate(d32, a, b, hn::Zero(d32), odd);
  return hn::RearrangeToOddPlusEven(even, odd);
}

// The 8 sub-blocks of a super-block, one float lane each (two passes on 128-bit targets).
using DS = hn::CappedTag<float, 8>;
using DSI32 = hn::Rebind<int32_t, DS>;
using DSU8 = hn::Rebind<uint8_t, DS>;

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

// Lane s of the result = the sum of v[s]'s 8 lanes.
HWY_INLINE __m256i SumEachOf8(const __m256i* v) {
  const __m256i v01 = _mm256_hadd_epi32(v[0], v[1]);  // per 128-bit half: v0 pairs, v1 pairs
  const __m256i v23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i v45 = _mm256_hadd_epi32(v[4], v[5]);
  const __m256i v67 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i v0123 = _mm256_hadd_epi32(v01, v23);  // [v0..v3 low-half sums | v0..v3 high-half sums]
  const __m256i v4567 = _mm256_hadd_epi32(v45, v67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(v0123, v4567, 0x20),
                          _mm256_permute2x128_si256(v0123, v4567, 0x31));
}

// Unsigned bytes times signed bytes, summed in fours into 8 int32 lanes (pairs never saturate for
// the callers' ranges: |u| <= 128, |s| <= 127 gives at most 2 * 128 * 127 per pair, so both forms
// give the same sums). AVX3_DL CPUs have AVX512-VNNI (Highway's check for the target requires
// it), whose vpdpbusd does the two steps in one. It is written as assembly with the EVEX encoding
// spelled out: Highway 1.0's target string names avxvnni (the VEX form, which Zen 4 lacks) instead
// of avx512vnni, and with it g++ would pick the VEX encoding.
HWY_INLINE __m256i ByteDot(__m256i u, __m256i s) {
#if HWY_TARGET == HWY_AVX3_DL
  __m256i acc = _mm256_setzero_si256();
  asm("%{evex%} vpdpbusd %[s], %[u], %[acc]" : [acc] "+v"(acc) : [u] "v"(u), [s] "v"(s));
  return acc;
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// Signed weight bytes times signed activation bytes: |w| times x with w's sign moved onto x
// (vpsignb, which also zeroes x where w is 0).
HWY_INLINE __m256i SignedByteDot(__m256i w, __m256i x) {
  return ByteDot(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
}

// The accumulation orders of the x86 quantised kernels (this file is built with
// -ffp-contract=off, so every product and sum below is rounded exactly where it is written). The
// row kernels hold 8 blocks in the lanes of one vector; the tiled prompt kernels
// (matmul_tiles-inl.h) hold 16 rows, one per lane, and follow the same order: the two agree bit
// for bit, so a token's result never depends on how many tokens share the call.
//  - Q8_0 (memory-bound when decoding; its tiles keep 8 tokens in registers with two chains):
//    block i's float(dot) * factor is fused into acc[i % 2] in block order; the result is
//    acc[0] + acc[1].
//  - Q4_0, Q4_1, Q4_K and Q6_K (compute-bound when decoding): per run of 8 blocks (Q4_0, Q4_1) or per
//    super-block's 8 sub-blocks (x blocks for Q6_K), p_i = float(dot_i) * factor_i, summed as the
//    tree ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)) and added to a running sum; Q4_0 blocks
//    after the last run of 8 add their p one by one. Q4_1's minimum terms m_i * xs_i * (sum of x_i)
//    form a second sum in the same order, added to the first at the end.

// One fused multiply-add on scalars (one rounding, as each lane of a vector MulAdd).
HWY_INLINE float Fma1(float a, float b, float c) {
  const hn::CappedTag<float, 1> d1;
  return hn::GetLane(hn::MulAdd(hn::Set(d1, a), hn::Set(d1, b), hn::Set(d1, c)));
}

// Q8_0's order for 8 consecutive blocks starting at an even index.
HWY_INLINE void AccumulateInOrder(hn::Vec<DS> dots, hn::Vec<DS> factors, float acc[2]) {
  const DS ds;
  HWY_ALIGN float v[8], f[8];
  hn::Store(dots, ds, v);
  hn::Store(factors, ds, f);
  for (int i = 0; i < 8; i += 2) {
    acc[0] = Fma1(v[i], f[i], acc[0]);
    acc[1] = Fma1(v[i + 1], f[i + 1], acc[1]);
  }
}

// The tree of Q4_K and Q6_K.
HWY_INLINE float TreeSum8(hn::Vec<DS> p) {
  const __m256 v = p.raw;
  const __m256 pairs = _mm256_add_ps(v, _mm256_permute_ps(v, 0xB1));           // lane 2i: p2i + p2i+1
  const __m256 quads = _mm256_add_ps(pairs, _mm256_permute_ps(pairs, 0x4E));    // lanes 0, 4: quads
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(quads), _mm256_extractf128_ps(quads, 1)));
}

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
    const auto packed = hn::BitCast(
        d16, hn::PromoteTo(hn::RebindToUnsigned<DG16>(), hn::LoadU(hn::Rebind<uint8_t, DG16>(), qs + j)));
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
    out[k] = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc_lo[k], acc_hi[k]))) -
             hn::GetLane(hn::SumOfLanes(ds, acc_min[k]));
  }
}
#endif

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
// 16 bytes of nibbles laid out as Q4_0's (and Q4_1's) as 32 unsigned bytes 0..15 in element order.
HWY_INLINE __m256i NibbleCodes(const uint8_t* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i low4 = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(packed, 4), low4), _mm_and_si128(packed, low4));
}

// Q5_0's 32 5th bits as 32 bytes in element order: 16 where bit j of qh is set, else 0. Byte j
// takes byte j / 8 of qh (pshufb) and keeps bit j % 8 of it.
HWY_INLINE __m256i FifthBitBytes(uint32_t qh) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(qh)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

// A block's codes as 32 unsigned bytes in element order (0..15, or 0..31 for Q5_0).
template <TensorType kType>
HWY_INLINE __m256i BlockCodes(const uint8_t* block) {
  using F = NibbleFormat<kType>;
  const __m256i codes = NibbleCodes(block + F::kCodesOffset);
  if constexpr (F::kFifthBit) return _mm256_or_si256(codes, FifthBitBytes(LoadFifthBits(block)));
  return codes;
}

// Nibble rows dotted with K tokens on x86: the codes meet the int8 activations as unsigned bytes
// (at most 2 * 31 * 127 a pair). Q4_0 and Q5_0 add -8 (-16) * (the block's sum of activations),
// the Q8_0 offset term / 16 (/ 8), in integers; Q4_1 adds m * (xs * sum of xq) per block (the
// activations' scaled sum, as Q4_K's mins) as a second float sum, added at the end. Runs of 8
// blocks are summed as trees (TreeSum8), then the blocks after the last run one by one: at 18 to
// 22 bytes a block, decoding is bound by this kernel.
template <TensorType kType, int K>
HWY_INLINE void DotNibbleTokens(const uint8_t* row, const TokenQ8* x, int64_t n, float* out) {
  using F = NibbleFormat<kType>;
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
      w[i] = BlockCodes<kType>(block);
    }
    prefetch_ahead(row + b * kBlockBytes, 8 * kBlockBytes);
    const auto dv = hn::Load(ds, d);
    for (int k = 0; k < K; ++k) {
      const int8_t* xk = x[k].q8 + b * 32;
      __m256i dots[8];
      for (int i = 0; i < 8; ++i) dots[i] = ByteDot(w[i], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xk + 32 * i)));
      __m256i sums_i = SumEachOf8(dots);
      if constexpr (!kHasMin) {
        sums_i = _mm256_add_epi32(sums_i, _mm256_srai_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                                                                x[k].q8_0_offset + b)),
                                                            F::kOffsetShift));
      }
      const auto sums = hn::Vec<DS>{_mm256_cvtepi32_ps(sums_i)};
      acc[k] += TreeSum8(hn::Mul(sums, hn::Mul(dv, hn::LoadU(ds, x[k].scale + b))));
      if constexpr (kHasMin) acc_min[k] += TreeSum8(hn::Mul(hn::Load(ds, m), hn::LoadU(ds, x[k].scaled_sum + b)));
    }
  }
  for (; b < n_blocks; ++b) {  // the last n_blocks % 8 blocks, one at a time
    const uint8_t* block = row + b * kBlockBytes;
    const __m256i wb = BlockCodes<kType>(block);
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
#endif

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
          const auto q1 =
              hn::Sub(hn::Or(hn::And(a, low_mask), hn::ShiftLeft<4>(hn::And(high, two_bits))), offset);
          const auto q2 = hn::Sub(
              hn::Or(hn::And(c, low_mask), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<2>(high), two_bits))),
              offset);
          const auto q3 = hn::Sub(
              hn::Or(hn::ShiftRight<4>(a), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<4>(high), two_bits))),
              offset);
          const auto q4 =
              hn::Sub(hn::Or(hn::ShiftRight<4>(c), hn::ShiftLeft<4>(hn::ShiftRight<6>(high))), offset);
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
#else
template <int K>
HWY_INLINE void DotQ6_K(const uint8_t* row, const TokenQ8* x, int64_t n, float* out) {
  for (int k = 0; k < K; ++k) out[k] = DotQ6_KWide(row, x[k].q, x[k].scale, n);
}
#endif

#include "ops/matmul_tiles-inl.h"  // NOLINT: per-target code, inside this namespace on purpose

// ------------------------------ rows x tokens

// Tokens per tile: their quantised activations (16 x n_cols int16) stay in L2 while each weight
// row of the task is read once per tile.
constexpr int64_t kTokenTile = 16;

// One row of a nibble format dotted with K tokens.
template <TensorType kType, int K>
HWY_INLINE void NibbleDots(const uint8_t* row, const TokenQ8* x, int64_t n, float* out) {
#if SQUEEZEKV_X86_BYTE_DOT
  DotNibbleTokens<kType, K>(row, x, n, out);
#else
  for (int k = 0; k < K; ++k) out[k] = DotNibbleRow<kType>(row, x[k].q, x[k].scale, x[k].scaled_sum, n);
#endif
}

// y[t * n_rows + r] for rows [row_begin, row_end) and every token.
// One row of a quantised type dotted with K tokens. Every kernel's per-token arithmetic is
// independent of K, so the 4-token prompt path and the 1-token path agree bit for bit.
template <int K>
HWY_INLINE void QuantizedDots(TensorType type, const uint8_t* row, const TokenQ8* x, int64_t n, float* out) {
  switch (type) {
    case TensorType::q8_0:
      return DotQ8_0Tokens<K>(row, x, n, out);
    case TensorType::q4_k:
      return DotQ4_K<K>(row, x, n, out);
    case TensorType::q6_k:
      return DotQ6_K<K>(row, x, n, out);
    case TensorType::q4_1:
      return NibbleDots<TensorType::q4_1, K>(row, x, n, out);
    case TensorType::q5_0:
      return NibbleDots<TensorType::q5_0, K>(row, x, n, out);
    default:  // q4_0
      return NibbleDots<TensorType::q4_0, K>(row, x, n, out);
  }
}

HWY_INLINE float FloatDot(TensorType type, const uint8_t* row, const float* x, int64_t n) {
  switch (type) {
    case TensorType::f16:
      return DotHalf<hwy::float16_t>(row, x, n);
    case TensorType::bf16:
      return DotHalf<hwy::bfloat16_t>(row, x, n);
    default:  // f32
      return DotF32(row, x, n);
  }
}

void MatmulRows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end,
                float* HWY_RESTRICT y) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const size_t stride = row_bytes(w.type, w.n_cols);
  const int64_t n = w.n_cols;
  const bool quantized = block_layout(w.type).block_elems > 1;
#if SQUEEZEKV_VNNI_TILES
  if (w.repacked != nullptr && has_repacked_layout(w.type) && HasVnni()) {
    return RepackedRows(w, in, row_begin, row_end, y);
  }
  if (UseTiles(w.type, in.n_tok)) return TiledRows(w, in, row_begin, row_end, y);
#endif
  for (int64_t t0 = 0; t0 < in.n_tok; t0 += kTokenTile) {
    const int64_t t1 = std::min(in.n_tok, t0 + kTokenTile);
    for (int64_t r = row_begin; r < row_end; ++r) {
      const uint8_t* row = base + static_cast<size_t>(r) * stride;
      int64_t t = t0;
      if (quantized) {
        for (; t + 4 <= t1; t += 4) {  // each weight block decoded once for 4 tokens
          TokenQ8 tokens[4];
          float dots[4];
          for (int k = 0; k < 4; ++k) tokens[k] = token_q8(*in.quantized, t + k, n);
          QuantizedDots<4>(w.type, row, tokens, n, dots);
          for (int k = 0; k < 4; ++k) y[(t + k) * w.n_rows + r] = dots[k];
        }
        for (; t < t1; ++t) {
          const TokenQ8 token = token_q8(*in.quantized, t, n);
          QuantizedDots<1>(w.type, row, &token, n, y + t * w.n_rows + r);
        }
      } else {
        for (; t < t1; ++t) y[t * w.n_rows + r] = FloatDot(w.type, row, in.x + t * n, n);
      }
    }
  }
}

// Whether this target reads and writes repacked matrices (repacked_weights.h).
bool Repacks() {
#if SQUEEZEKV_VNNI_TILES
  return HasVnni();
#else
  return false;
#endif
}

void RepackGroups(const WeightMatrix& w, int64_t group_begin, int64_t group_end, uint8_t* out) {
#if SQUEEZEKV_VNNI_TILES
  if (HasVnni()) return RepackGroupsVnni(w, group_begin, group_end, out);
#endif
  (void)w, (void)group_begin, (void)group_end, (void)out;  // repack_groups checks Repacks first
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <string>

#include "squeezekv/base/errors.h"
#include "squeezekv/ops/model_ops.h"
#include "squeezekv/ops/thread_pool.h"

namespace squeezekv {

HWY_EXPORT(MatmulRows);
HWY_EXPORT(Repacks);
HWY_EXPORT(RepackGroups);

namespace {

void check_shape(const WeightMatrix& w, int64_t n_tok) {
  require(block_layout(static_cast<uint32_t>(w.type)).has_value(), "weight type",
          static_cast<uint32_t>(w.type), "is not supported");
  require(w.n_rows >= 0, "n_rows", w.n_rows, "must be >= 0");
  const int64_t block = block_layout(w.type).block_elems;
  if (w.n_cols < 0 || w.n_cols % block != 0) {  // the message is built only on failure: no allocation per call
    require(false, "n_cols", w.n_cols,
            "must be a non-negative multiple of the block size of " +
                std::string(tensor_type_name(static_cast<uint32_t>(w.type))));
  }
  require(n_tok >= 0, "n_tok", n_tok, "must be >= 0");
  require(w.data != nullptr || w.n_rows == 0 || w.n_cols == 0, "weight data", "null",
          "must point at the matrix");
}

bool is_quantized(TensorType type) { return block_layout(type).block_elems > 1; }

// Task sizes in whole 16-row tiles (the prompt tiles' height), except for matrices smaller than one.
int64_t round_rows(int64_t rows) { return (rows + 15) / 16 * 16; }

}  // namespace

// Splits the rows of every output into tasks of about equal size (a few per worker, to balance
// uneven progress) and runs them in one parallel region. Tasks are whole rows, so the split never
// changes any result.
void run_rows(std::span<const MatmulOutput> outputs, const detail::MatmulInput& in, ThreadPool* pool) {
  int64_t total_rows = 0;
  for (const MatmulOutput& o : outputs) total_rows += o.w->n_rows;
  const int64_t n_cols = outputs.front().w->n_cols;
  const size_t workers = pool != nullptr ? pool->num_workers() : 1;
  if (workers == 1 || total_rows * n_cols * in.n_tok < kMatmulParallelMacs) {
    for (size_t m = 0; m < outputs.size(); ++m) {
      HWY_DYNAMIC_DISPATCH(MatmulRows)(*outputs[m].w, in, 0, outputs[m].w->n_rows, outputs[m].y);
    }
    return;
  }
  const int64_t target_tasks = std::min<int64_t>(total_rows, static_cast<int64_t>(workers) * 4);
  const int64_t rows_per_task = round_rows((total_rows + target_tasks - 1) / target_tasks);
  int64_t n_tasks = 0;
  for (const MatmulOutput& o : outputs) n_tasks += (o.w->n_rows + rows_per_task - 1) / rows_per_task;
  pool->parallel_for(static_cast<size_t>(n_tasks), [&](size_t task, size_t /*worker*/) {
    auto t = static_cast<int64_t>(task);
    for (size_t m = 0; m < outputs.size(); ++m) {
      const int64_t rows = outputs[m].w->n_rows;
      const int64_t tasks_here = (rows + rows_per_task - 1) / rows_per_task;
      if (t >= tasks_here) {
        t -= tasks_here;
        continue;
      }
      const int64_t begin = t * rows_per_task;
      const int64_t end = std::min(rows, begin + rows_per_task);
      HWY_DYNAMIC_DISPATCH(MatmulRows)(*outputs[m].w, in, begin, end, outputs[m].y);
      return;
    }
  });
}

// Reused across calls on this thread, so steady-state inference allocates nothing here.
detail::MatmulInput prepare_input(std::span<const MatmulOutput> outputs, const float* x, int64_t n_tok) {
  thread_local detail::QuantizedActivations quantized;
  detail::MatmulInput in{x, nullptr, n_tok};
  // K-quant weights take activations in 256-element blocks, the others in blocks of 32 (as ggml
  // pairs them, so that results match llama.cpp's); a mixed call takes the finer blocks.
  bool any_quantized = false, all_k_quants = true;
  for (const MatmulOutput& o : outputs) {
    if (!is_quantized(o.w->type)) continue;
    any_quantized = true;
    all_k_quants = all_k_quants && block_layout(o.w->type).block_elems == 256;
  }
  if (any_quantized) {
    quantized.assign(x, n_tok, outputs.front().w->n_cols, all_k_quants);
    in.quantized = &quantized;
  }
  return in;
}

void matmul_many(std::span<const MatmulOutput> outputs, const float* x, int64_t n_tok, ThreadPool* pool) {
  require(!outputs.empty(), "outputs", 0, "matmul_many needs at least one matrix");
  for (const MatmulOutput& o : outputs) {
    check_shape(*o.w, n_tok);
    if (o.w->n_cols != outputs.front().w->n_cols) {
      require(false, "n_cols", o.w->n_cols,
              "every matrix of matmul_many must have n_cols = " + std::to_string(outputs.front().w->n_cols));
    }
  }
  if (n_tok == 0) return;
  run_rows(outputs, prepare_input(outputs, x, n_tok), pool);
}

void matmul(const WeightMatrix& w, const float* x, int64_t n_tok, float* y, ThreadPool* pool) {
  check_shape(w, n_tok);
  if (w.n_rows == 0 || n_tok == 0) return;
  const MatmulOutput out{&w, y};
  matmul_many(std::span(&out, 1), x, n_tok, pool);
}

void matmul_swiglu(const WeightMatrix& gate, const WeightMatrix& up, const float* x, int64_t n_tok,
                   float* gate_out, float* up_out, ThreadPool* pool) {
  check_shape(gate, n_tok);
  check_shape(up, n_tok);
  require(up.n_rows == gate.n_rows && up.n_cols == gate.n_cols, "up rows", up.n_rows,
          "must match the gate matrix's shape");
  if (gate.n_rows == 0 || n_tok == 0) return;
  // Gate and up rows [begin, end) go to the same task (interleaved outputs), so the task can apply
  // silu(gate) * up to its slice as soon as both are written.
  const MatmulOutput outputs[2] = {{&gate, gate_out}, {&up, up_out}};
  const detail::MatmulInput in = prepare_input(outputs, x, n_tok);
  const int64_t rows = gate.n_rows;
  const size_t workers = pool != nullptr ? pool->num_workers() : 1;
  auto slice = [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(MatmulRows)(gate, in, begin, end, gate_out);
    HWY_DYNAMIC_DISPATCH(MatmulRows)(up, in, begin, end, up_out);
    for (int64_t t = 0; t < n_tok; ++t) {
      float* g = gate_out + t * rows + begin;
      swiglu(g, up_out + t * rows + begin, end - begin, g);
    }
  };
  if (workers == 1 || 2 * rows * gate.n_cols * n_tok < kMatmulParallelMacs) return slice(0, rows);
  const int64_t rows_per_task = round_rows((rows + int64_t(workers) * 4 - 1) / (int64_t(workers) * 4));
  const int64_t n_tasks = (rows + rows_per_task - 1) / rows_per_task;
  pool->parallel_for(static_cast<size_t>(n_tasks), [&](size_t task, size_t /*worker*/) {
    const int64_t begin = static_cast<int64_t>(task) * rows_per_task;
    const int64_t end = std::min(rows, begin + rows_per_task);
    if (begin < end) slice(begin, end);
  });
}

void matvec(const WeightMatrix& w, const float* x, float* y, ThreadPool* pool) { matmul(w, x, 1, y, pool); }

bool can_repack(const WeightMatrix& w) {
  return has_repacked_layout(w.type) && w.n_rows > 0 && w.n_cols > 0 &&
         w.n_cols % block_layout(w.type).block_elems == 0 && HWY_DYNAMIC_DISPATCH(Repacks)();
}

void repack_groups(const WeightMatrix& w, int64_t group_begin, int64_t group_end, uint8_t* out) {
  require(can_repack(w), "weight type", tensor_type_name(static_cast<uint32_t>(w.type)),
          "cannot be repacked on this CPU (repacking needs Q8_0, Q4_K or Q6_K and AVX-512 VNNI)");
  check_shape(w, 1);
  const int64_t n_groups = (w.n_rows + kRepackedGroupRows - 1) / kRepackedGroupRows;
  require(group_begin >= 0 && group_begin <= group_end, "group_begin", group_begin,
          "must be in [0, group_end]");
  require(group_end <= n_groups, "group_end", group_end, "must be at most the groups " + std::to_string(n_groups));
  require(out != nullptr, "out", "null", "must point at repacked_bytes(w) bytes");
  HWY_DYNAMIC_DISPATCH(RepackGroups)(w, group_begin, group_end, out);
}

}  // namespace squeezekv
#endif  // HWY_ONCE
