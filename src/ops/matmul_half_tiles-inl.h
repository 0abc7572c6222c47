// The repacked layouts (repacked_weights.h) on x86 targets without the AVX-512 VNNI tiles (AVX2
// CPUs): half-group tiles read 8 rows at a time, the 32-byte half h of each 64-byte vector of a
// group (lane r = row 8h + r), for T tokens. The row kernels spend much of their work on
// horizontal sums, once per (row, token, super-block or run of 8 blocks); with a row per lane
// there are none. Each kind's tile (src/ops/matmul_<type>.cc, matmul_nibbles-inl.h) keeps its row
// kernel's arithmetic order lane by lane, so results are bit for bit the row kernel's. This file:
// what the tiles share and the driver. Per-target code with Highway's per-target include guard,
// as matmul_rows-inl.h.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "ops/activation_q8.h"
#include "ops/matmul_rows-inl.h"
#include "squeezekv/ops/repacked_weights.h"
#include "squeezekv/ops/weight_matrix.h"

// clang-format off
#if defined(SQUEEZEKV_OPS_MATMUL_HALF_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SQUEEZEKV_OPS_MATMUL_HALF_TILES_INL_H_
#undef SQUEEZEKV_OPS_MATMUL_HALF_TILES_INL_H_
#else
#define SQUEEZEKV_OPS_MATMUL_HALF_TILES_INL_H_
#endif
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {

#if SQUEEZEKV_X86_BYTE_DOT
namespace half_tiles {

// 4 activation bytes (or an int32) in every dword lane, straight from memory (vpbroadcastd).
HWY_INLINE __m256i Broadcast4(const void* p) { return _mm256_broadcastd_epi32(_mm_loadu_si32(p)); }

// ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)), lane by lane: TreeSum8's order.
HWY_INLINE __m256 Tree8(const __m256* p) {
  return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(p[0], p[1]), _mm256_add_ps(p[2], p[3])),
                       _mm256_add_ps(_mm256_add_ps(p[4], p[5]), _mm256_add_ps(p[6], p[7])));
}

// Writes lanes [0, valid) of a half's results to rows r0.. of token row t.
HWY_INLINE void StoreHalf(__m256 result, float* y, int64_t n_rows, int64_t t, int64_t r0, int64_t valid) {
  float* dst = y + t * n_rows + r0;
  if (valid >= 8) return _mm256_storeu_ps(dst, result);
  HWY_ALIGN float lanes[8];
  _mm256_store_ps(lanes, result);
  std::memcpy(dst, lanes, static_cast<size_t>(valid) * sizeof(float));
}

// How far ahead a one-token tile asks for its lines (a unit's worth at a time): 9 KiB, four Q4_K
// units. From 1 KiB (the row kernels' distance) on the AVX2 build, AMD EPYC, alternated:
// `ops_bench --benchmark_filter='matmul_from_memory/.*repacked.*threads:2'` Q4_K 44.1 / 42.6 ->
// 50.3 / 55.6 GB/s, the other types level to better; Qwen's decode 39.9 / 40.4 / 39.2 -> 41.4 /
// 42.0 / 42.6 tokens/s. 18 and 36 KiB were no better than 9 on Q4_K.
inline constexpr size_t kOneTokenAheadBytes = 9216;

// Tokens per pass over a task's rows: their activations (a few tens of KiB) stay in L2 while each
// half's rows are read from it once per tile.
constexpr int64_t kTokenChunk = 32;

// Tiles of T of the tokens [t, t1) against H halves from row r0 (rows [r0, row_end) of the
// matrix are wanted) by Kind::Tile<T, H>(group, n_super, first half, tokens, out[H * T]);
// returns the next token.
template <class Kind, int T, int H>
HWY_INLINE int64_t Tiles(const uint8_t* group, int64_t n_super, const detail::MatmulInput& in, int64_t t, int64_t t1,
                         int64_t n, float* y, int64_t n_rows, int64_t r0, int64_t row_end) {
  for (; t + T <= t1; t += T) {
    TokenQ8 tokens[T];
    for (int k = 0; k < T; ++k) tokens[k] = token_q8(*in.quantized, t + k, n);
    __m256 result[H * T];
    Kind::template Tile<T, H>(group, n_super, static_cast<size_t>((r0 / 8) % 2), tokens, result);
    for (int i = 0; i < H && r0 + 8 * i < row_end; ++i) {
      for (int k = 0; k < T; ++k) StoreHalf(result[i * T + k], y, n_rows, t + k, r0 + 8 * i, row_end - r0 - 8 * i);
    }
  }
  return t;
}

}  // namespace half_tiles

// Rows [row_begin, row_end) (row_begin a multiple of 16, as the driver's tasks are) of w's
// repacked layout times every token of the call, by Kind's half-group tiles: a call of one token
// takes both halves of a group at once, so that each line is read once, in order, and memory
// streams while the products run (half by half, the second half's pass left memory idle: Qwen's
// decode 14 % slower); a larger call takes half groups, 4 tokens at a time.
template <class Kind>
HWY_NOINLINE void HalfTileRows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end,
                               float* HWY_RESTRICT y) {
  using half_tiles::Tiles;
  const int64_t n = w.n_cols, n_super = n / Kind::kUnitCols;
  const size_t group_bytes = repacked_group_bytes(w.type, w.n_cols);
  auto group = [&](int64_t r0) {
    return static_cast<const uint8_t*>(w.repacked) + static_cast<size_t>(r0 / 16) * group_bytes;
  };
  if (in.n_tok == 1) {
    for (int64_t r0 = row_begin; r0 < row_end; r0 += 16) {
      Tiles<Kind, 1, 2>(group(r0), n_super, in, 0, 1, n, y, w.n_rows, r0, row_end);
    }
    return;
  }
  for (int64_t t0 = 0; t0 < in.n_tok; t0 += half_tiles::kTokenChunk) {
    const int64_t t1 = std::min(in.n_tok, t0 + half_tiles::kTokenChunk);
    for (int64_t r0 = row_begin; r0 < row_end; r0 += 8) {
      int64_t t = Tiles<Kind, 4, 1>(group(r0), n_super, in, t0, t1, n, y, w.n_rows, r0, row_end);
      t = Tiles<Kind, 2, 1>(group(r0), n_super, in, t, t1, n, y, w.n_rows, r0, row_end);
      Tiles<Kind, 1, 1>(group(r0), n_super, in, t, t1, n, y, w.n_rows, r0, row_end);
    }
  }
}
#endif  // SQUEEZEKV_X86_BYTE_DOT

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
