// Prompt products as register tiles on x86 targets with VNNI (vpdpbusd): 16 weight rows x up to
// 8 tokens (Q8_0) or 4 (Q4_0, Q4_1, Q4_K, Q6_K). The shared driver: the panel, the transposes and
// dots every kind uses, and how a call's rows and tokens are walked (whole panels, streamed pieces,
// repacked matrices). Each weight type's tiles, a small struct (its unit, pack, tile and how its
// two accumulators combine), live in its kernel file (src/ops/matmul_<type>.cc) and are run by
// TiledRows, RepackedRows and RepackGroupsOf below.
//
// Why a panel: in GGUF a block's 32 bytes belong to one row, so a vector of them serves one
// (row, token) pair and needs a horizontal sum per block. Here 16 rows are first regrouped into a
// thread-local panel where one 512-bit vector holds the same 4 columns of all 16 rows (lane r =
// row r); vpdpbusd then multiplies it with one activation dword broadcast from memory, so a block
// is 8 vpdpbusd + 3 float ops per token for 16 rows x 32 columns, with no horizontal sums. The
// panel (a copy of 16 rows, at most a few hundred KiB, in L2) is built once per call and serves
// every token of the call, so it costs little beside the product once a call has a few tokens.
// Calls of up to 16 tokens (a server's batched decode step) build it a few blocks at a time
// instead, interleaved with the products (StreamedRows).
//
// Each lane sums the blocks in the order of the row kernels (see the accumulation orders in
// matmul_rows-inl.h), so a tile's results are bit for bit those of the one-token path.
//
// Written in AVX-512 intrinsics: only the AVX3 and AVX3_DL targets compile the tiles
// (SQUEEZEKV_VNNI_TILES is 1 there, 0 on every other target, which compiles none of this).
// Per-target code with Highway's per-target include guard, as matmul_rows-inl.h.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "ops/activation_q8.h"
#include "ops/matmul_rows-inl.h"
#include "squeezekv/ops/repacked_weights.h"
#include "squeezekv/ops/weight_matrix.h"
// (The AVX-512 intrinsics come with hwy/highway.h on the targets that compile the tiles; including
// <immintrin.h> here first would bypass Highway's silencing of GCC's false maybe-uninitialized
// warnings in avx512fintrin.h.)

// clang-format off
#if defined(SQUEEZEKV_OPS_MATMUL_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SQUEEZEKV_OPS_MATMUL_TILES_INL_H_
#undef SQUEEZEKV_OPS_MATMUL_TILES_INL_H_
#else
#define SQUEEZEKV_OPS_MATMUL_TILES_INL_H_
#endif
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {

#undef SQUEEZEKV_VNNI_TILES
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define SQUEEZEKV_VNNI_TILES 1
// AVX-512 CPUs with VNNI but not the rest of AVX3_DL (Cascade Lake) run the AVX3 target, and
// Highway 1.0's AVX3_DL target string names avxvnni (the VEX form) but not avx512vnni, which the
// 512-bit vpdpbusd needs: on both targets the tiles add it, and UseTiles asks the CPU for it.
#define SQUEEZEKV_VNNI __attribute__((target(HWY_TARGET_STR ",avx512vnni")))
// Lambdas in the tiles must be inlined: their accumulators then stay in registers.
#define SQUEEZEKV_VNNI_LAMBDA __attribute__((always_inline, target(HWY_TARGET_STR ",avx512vnni")))

constexpr int64_t kTileRows = 16;  // one 512-bit lane per row

// Calls with fewer tokens take the row kernels: below this the panel costs more than it saves
// (Q8_0 measured: 3 tokens ~27 -> ~41 tokens/s with the tiles, 2 level; Q4_K at 2 slower). Each
// type's file passes its own to UseTiles.
constexpr int64_t kTileMinTokens = 4, kTileMinTokensQ8_0 = 3;

// 16 rows regrouped for the tiles. bytes: per 32 columns (a Q8_0 block, a Q4_K sub-block, a Q6_K
// x block), 8 vectors, vector g = columns 4g..4g+3 of each row as unsigned bytes. factor: per
// block, d of each row (Q8_0, Q4_0, Q4_1), per sub-block d * scale (Q4_K), per super-block d (Q6_K);
// factor_min: per sub-block, dmin * min (Q4_K), per block m (Q4_1).
// (std::vector would drop __m512i's alignment: GCC ignores a vector type's attributes in template
// arguments.)
template <class T>
class AlignedBuffer {
 public:
  T* reserve(size_t n) {
    if (n > capacity_) {
      data_ = hwy::AllocateAligned<T>(n);
      capacity_ = n;
    }
    return data_.get();
  }
  T* data() const { return data_.get(); }

 private:
  hwy::AlignedFreeUniquePtr<T[]> data_;
  size_t capacity_ = 0;
};

struct Panel {
  AlignedBuffer<__m512i> bytes;
  AlignedBuffer<__m256i> halves;  // Q8_0: per block, the 16 rows' fp16 d (as a repacked matrix holds it)
  AlignedBuffer<__m512> factor;
  AlignedBuffer<__m512> factor_min;
  AlignedBuffer<__m512i> scales;  // Q6_K: per x block, the int8 scales of its two halves per row
};

// Byte offsets of the panel's 16 rows from the first; rows past `valid` repeat the last row, so
// that every load stays inside the matrix (their results are never stored).
HWY_INLINE void RowOffsets(size_t stride, int valid, size_t* offsets) {
  for (int r = 0; r < kTileRows; ++r) offsets[r] = static_cast<size_t>(std::min(r, valid - 1)) * stride;
}

// out[g] lane r = the 4 bytes at src + offsets[r] + 4g, for g < 8: the 16 x 8 transpose of 32
// bytes from each of 16 rows, in registers (rows r and r + 8 share a vector, then an 8 x 8 dword
// transpose runs in both 256-bit halves at once). About a quarter of the cost of 8 gathers.
HWY_INLINE SQUEEZEKV_VNNI void TransposeRows(const uint8_t* src, const size_t* offsets, __m512i* out) {
  __m512i z[8];
  for (int r = 0; r < 8; ++r) {
    const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + offsets[r]));
    const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + offsets[r + 8]));
    z[r] = _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
  }
  __m512i pairs[8];  // per 128-bit lane: dwords of rows 2i and 2i + 1 interleaved
  for (int i = 0; i < 4; ++i) {
    pairs[2 * i] = _mm512_unpacklo_epi32(z[2 * i], z[2 * i + 1]);
    pairs[2 * i + 1] = _mm512_unpackhi_epi32(z[2 * i], z[2 * i + 1]);
  }
  __m512i quads[8];  // quads[4h + c]: rows 4h..4h + 3, dword c (lanes 0, 2) and c + 4 (lanes 1, 3)
  for (int h = 0; h < 2; ++h) {
    const __m512i* p = pairs + 4 * h;
    quads[4 * h] = _mm512_unpacklo_epi64(p[0], p[2]);
    quads[4 * h + 1] = _mm512_unpackhi_epi64(p[0], p[2]);
    quads[4 * h + 2] = _mm512_unpacklo_epi64(p[1], p[3]);
    quads[4 * h + 3] = _mm512_unpackhi_epi64(p[1], p[3]);
  }
  const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);     // 128-bit lanes 0, 2
  const __m512i second = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);  // 128-bit lanes 1, 3
  for (int c = 0; c < 4; ++c) {
    out[c] = _mm512_permutex2var_epi64(quads[c], first, quads[4 + c]);
    out[c + 4] = _mm512_permutex2var_epi64(quads[c], second, quads[4 + c]);
  }
}

// 4 bytes broadcast to every lane straight from memory (a load, or vpdpbusd's {1to16} operand):
// through a general register the broadcast costs a cross-domain move and was the tiles' bottleneck.
HWY_INLINE SQUEEZEKV_VNNI __m512i Broadcast32(const void* p) { return _mm512_broadcastd_epi32(_mm_loadu_si32(p)); }

// acc + the dword dots of unsigned bytes u with the signed dword at p broadcast to every lane, for
// a tile of T tokens. One token: vpdpbusd with the broadcast folded into its memory operand, which
// g++ does not do for the intrinsic (a vpbroadcastd beside each product, a third more instructions
// in a loop bound by how many loads it keeps in flight). More tokens keep the intrinsic: the
// folded form made Q8_0's pp512 3-5 % slower (tiles of 8 tokens, AMD EPYC).
template <int T>
HWY_INLINE SQUEEZEKV_VNNI __m512i DotBroadcast(__m512i acc, __m512i u, const void* p) {
  if constexpr (T == 1) {
    using AliasedDword = int32_t __attribute__((may_alias));
    asm("vpdpbusd %[s]%{1to16%}, %[u], %[acc]"
        : [acc] "+v"(acc)
        : [u] "v"(u), [s] "m"(*static_cast<const AliasedDword*>(p)));
    return acc;
  } else {
    return _mm512_dpbusd_epi32(acc, u, Broadcast32(p));
  }
}

// The integer dots of 16 columns (groups first..first + 3) of the panel with T tokens: s[k] +=
// panel byte * token k's activation byte over them (one broadcast dword per vpdpbusd).
template <int T>
HWY_INLINE SQUEEZEKV_VNNI void BlockHalfDots(const __m512i* w, const TokenQ8* x, int64_t column, int first,
                                             __m512i* s) {
  for (int g = first; g < first + 4; ++g) {
    const __m512i wg = _mm512_load_si512(w + g);
    for (int k = 0; k < T; ++k) s[k] = DotBroadcast<T>(s[k], wg, x[k].q8 + column + 4 * g);
  }
}

// The same over a whole 32-column block.
template <int T>
HWY_INLINE SQUEEZEKV_VNNI void BlockDots(const __m512i* w, const TokenQ8* x, int64_t column, __m512i* s) {
  BlockHalfDots<T>(w, x, column, 0, s);
  BlockHalfDots<T>(w, x, column, 4, s);
}

// Writes lanes [0, valid) of token k's 16 results to y (rows r0.. of token row t0 + k).
template <int T>
HWY_INLINE SQUEEZEKV_VNNI void StoreTile(const __m512* result, float* y, int64_t n_rows, int64_t t0, int64_t r0,
                                         __mmask16 valid) {
  for (int k = 0; k < T; ++k) _mm512_mask_storeu_ps(y + (t0 + k) * n_rows + r0, valid, result[k]);
}

// Adds the tree ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)) of 8 products, p_i =
// product(first + i), to acc: the order of the row kernels' TreeSum8, lane by lane.
template <int T, class Product>
HWY_INLINE SQUEEZEKV_VNNI void AddTreeOf8(Product product, int64_t first, __m512* acc) {
  __m512 a[T], b[T], half[2][T];
  for (int h = 0; h < 2; ++h) {
    for (int q = 0; q < 2; ++q) {
      product(first + 4 * h + 2 * q, a);
      product(first + 4 * h + 2 * q + 1, b);
      for (int k = 0; k < T; ++k) {
        const __m512 pair = _mm512_add_ps(a[k], b[k]);
        half[h][k] = q == 0 ? pair : _mm512_add_ps(half[h][k], pair);
      }
    }
  }
  for (int k = 0; k < T; ++k) acc[k] = _mm512_add_ps(acc[k], _mm512_add_ps(half[0][k], half[1][k]));
}

// Adds the products of blocks [0, n) to acc in the row kernels' order: runs of 8 as trees
// (AddTreeOf8), then the blocks after the last run one by one.
template <int T, class Product>
HWY_INLINE SQUEEZEKV_VNNI void AddBlocksInOrder(Product product, int64_t n, __m512* acc) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) AddTreeOf8<T>(product, j, acc);
  for (; j < n; ++j) {
    __m512 p[T];
    product(j, p);
    for (int k = 0; k < T; ++k) acc[k] = _mm512_add_ps(acc[k], p[k]);
  }
}

// What the tiles need of each weight type: its unit (a block, or a K-quant super-block), how a
// run of units is packed, its tile, how the two accumulators make the dot, its widest tile (Q8_0's
// registers fit 8 tokens, the others' 4) and the units of a streamed panel (about 300 bytes a row;
// Q4_0's must be runs of 8 blocks, its trees).
//
// Each tile adds a panel of n units to T tokens' accumulators a0, a1 (zero at the start of a
// row, carried from one panel to the next when a row is streamed through several), in the order of
// the type's row kernel; combine turns them into the dots. The panel starts at the tokens' 32-value
// block x0.
// The kinds whose tiles read the whole panel (Q8_0's read a view of its codes and scales, which a
// repacked matrix can give too).
struct PanelView {
  using View = const Panel*;
  static View view(const Panel& panel) { return &panel; }
};

// Every token of the call against the panel, T tokens at a time; tile(k, tokens, result) runs one
// tile of k = std::integral_constant<int, T> tokens.
template <int T, class Tile>
HWY_INLINE SQUEEZEKV_VNNI int64_t TokenTiles(Tile tile, const detail::MatmulInput& in, int64_t t, int64_t n, float* y,
                                             int64_t n_rows, int64_t r0, __mmask16 valid) {
  for (; t + T <= in.n_tok; t += T) {
    TokenQ8 tokens[T];
    for (int k = 0; k < T; ++k) tokens[k] = token_q8(*in.quantized, t + k, n);
    __m512 result[T];
    tile(std::integral_constant<int, T>{}, tokens, result);
    StoreTile<T>(result, y, n_rows, t, r0, valid);
  }
  return t;
}

// All the call's tokens: tiles of kMaxTokens (8 or 4), then of 4, 2 and 1 for the rest.
template <int kMaxTokens, class Tile>
HWY_INLINE SQUEEZEKV_VNNI void EveryToken(Tile tile, const detail::MatmulInput& in, int64_t n, float* y, int64_t n_rows,
                                          int64_t r0, __mmask16 valid) {
  int64_t t = 0;
  if constexpr (kMaxTokens == 8) t = TokenTiles<8>(tile, in, t, n, y, n_rows, r0, valid);
  t = TokenTiles<4>(tile, in, t, n, y, n_rows, r0, valid);
  t = TokenTiles<2>(tile, in, t, n, y, n_rows, r0, valid);
  TokenTiles<1>(tile, in, t, n, y, n_rows, r0, valid);
}

// Calls of at most kStreamedMaxTokens tokens (a server's batched decode step) stream each 16 rows
// through small panels of Kind::kStreamUnits units (a few KiB, in L1) that every token uses
// before the next is built: reading the rows from memory then overlaps the products, where one
// whole-row panel first reads all of them and then computes with memory idle (1B Q8_0 model,
// `squeezekv bench -p 8,16`: 8-token steps ~79 -> ~95-117 tokens/s, 16-token ~127 -> ~140-165).
// The accumulators carry from panel to panel, so per-token arithmetic and its order are unchanged:
// that needs Q8_0's panels to hold an even number of blocks (its two chains alternate) and Q4_0's
// whole runs of 8 (its trees).
constexpr int64_t kStreamedMaxTokens = 16;

// Tiles of T of the tokens from t on against a panel of n units from block x0; returns the next
// token.
template <class Kind, int T>
HWY_INLINE SQUEEZEKV_VNNI int64_t PanelTiles(typename Kind::View panel, int64_t n, const TokenQ8* tokens, int64_t x0,
                                             int64_t t, int64_t n_tok, __m512* a0, __m512* a1) {
  for (; t + T <= n_tok; t += T) {
    __m512 b0[T], b1[T];
    for (int k = 0; k < T; ++k) {
      b0[k] = a0[t + k];
      b1[k] = a1[t + k];
    }
    Kind::template tile<T>(panel, n, tokens + t, x0, b0, b1);
    for (int k = 0; k < T; ++k) {
      a0[t + k] = b0[k];
      a1[t + k] = b1[k];
    }
  }
  return t;
}

// source(u0, n): the view of units [u0, u0 + n) of the 16 rows (packed then, or repacked already),
// in pieces of piece_units.
template <class Kind, class Source>
HWY_INLINE SQUEEZEKV_VNNI void StreamedRows(Source source, int64_t n_units, int64_t piece_units, const TokenQ8* tokens,
                                            int64_t n_tok, float* y, int64_t n_rows, int64_t r0, __mmask16 mask) {
  __m512 a0[kStreamedMaxTokens], a1[kStreamedMaxTokens];
  for (int64_t t = 0; t < n_tok; ++t) a0[t] = a1[t] = _mm512_setzero_ps();
  for (int64_t u0 = 0; u0 < n_units; u0 += piece_units) {
    const int64_t n = std::min(n_units, u0 + piece_units) - u0;
    const typename Kind::View panel = source(u0, n);
    const int64_t x0 = u0 * (Kind::kUnitCols / detail::activation_block);
    int64_t t = 0;
    if constexpr (Kind::kMaxTokens == 8) t = PanelTiles<Kind, 8>(panel, n, tokens, x0, t, n_tok, a0, a1);
    t = PanelTiles<Kind, 4>(panel, n, tokens, x0, t, n_tok, a0, a1);
    t = PanelTiles<Kind, 2>(panel, n, tokens, x0, t, n_tok, a0, a1);
    PanelTiles<Kind, 1>(panel, n, tokens, x0, t, n_tok, a0, a1);
  }
  for (int64_t t = 0; t < n_tok; ++t) _mm512_mask_storeu_ps(y + t * n_rows + r0, mask, Kind::combine(a0[t], a1[t]));
}

// Every token of the call against the whole view of the 16 rows, in tiles.
template <class Kind>
HWY_INLINE SQUEEZEKV_VNNI void WholeRows(typename Kind::View panel, int64_t n_units, const detail::MatmulInput& in,
                                         int64_t n, float* y, int64_t n_rows, int64_t r0, __mmask16 mask) {
  auto tile = [&](auto k, const TokenQ8* x, __m512* out) SQUEEZEKV_VNNI_LAMBDA {
    constexpr int T = decltype(k)::value;
    __m512 a0[T], a1[T];
    for (int i = 0; i < T; ++i) a0[i] = a1[i] = _mm512_setzero_ps();
    Kind::template tile<T>(panel, n_units, x, 0, a0, a1);
    for (int i = 0; i < T; ++i) out[i] = Kind::combine(a0[i], a1[i]);
  };
  EveryToken<Kind::kMaxTokens>(tile, in, n, y, n_rows, r0, mask);
}

// Whether the CPU has AVX512-VNNI: asked of the CPU here too rather than trusted to Highway's
// target check.
HWY_INLINE bool HasVnni() {
  static const bool has_vnni = __builtin_cpu_supports("avx512vnni");
  return has_vnni;
}

// Whether rows take the tiles for a call of n_tok tokens (min_tokens: the type's threshold).
HWY_INLINE bool UseTiles(int64_t n_tok, int64_t min_tokens) { return HasVnni() && n_tok >= min_tokens; }

// A kind whose one-token tile asks for its own lines says how far ahead (kOneTokenAhead, as
// Q8_0's); a one-token call then runs each 16 rows' units through one tile, as one piece without
// the window. Q8_0's pieces of 4 blocks cost 10-20 % of the bandwidth probe on one 640- or
// 2048-column matrix (the accumulators of a call of up to 16 tokens stored and reloaded every
// piece; AMD EPYC, docs/notes/).
template <class Kind>
constexpr bool kOneTokenTileAsksAhead = requires {
  Kind::kOneTokenAhead;
};

// Whether a call of n_tok tokens takes each 16 rows' units as that one piece (no window).
template <class Kind>
HWY_INLINE bool OneTokenInOnePiece(int64_t n_tok) {
  return kOneTokenTileAsksAhead<Kind> && n_tok == 1;
}

// What both kinds of weights share: for each 16 rows, a call of more than 16 tokens takes the
// whole view whole(r0, valid) of WholeKind and runs every token over it; a smaller call streams
// the pieces of kUnits units that piece(r0, valid, u0, count) gives (one piece of every unit for
// one token when the kind's tile asks ahead itself).
template <class Kind, int64_t kUnits, class WholeKind, class Whole, class Piece>
HWY_INLINE SQUEEZEKV_VNNI void GroupRows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin,
                                         int64_t row_end, float* HWY_RESTRICT y, Whole whole, Piece piece) {
  const int64_t n = w.n_cols, n_units = n / Kind::kUnitCols;
  const bool streamed = in.n_tok <= kStreamedMaxTokens;
  const int64_t piece_units = OneTokenInOnePiece<Kind>(in.n_tok) ? n_units : kUnits;
  TokenQ8 tokens[kStreamedMaxTokens];
  for (int64_t t = 0; streamed && t < in.n_tok; ++t) tokens[t] = token_q8(*in.quantized, t, n);
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kTileRows) {
    const int valid = static_cast<int>(std::min(kTileRows, row_end - r0));
    const auto mask = static_cast<__mmask16>((1u << valid) - 1u);
    if (!streamed) {
      WholeRows<WholeKind>(whole(r0, valid), n_units, in, n, y, w.n_rows, r0, mask);
      continue;
    }
    auto source = [&](int64_t u0, int64_t count) SQUEEZEKV_VNNI_LAMBDA { return piece(r0, valid, u0, count); };
    StreamedRows<Kind>(source, n_units, piece_units, tokens, in.n_tok, y, w.n_rows, r0, mask);
  }
}

// GGUF rows: each view is a panel packed for this call.
template <class Kind>
HWY_INLINE SQUEEZEKV_VNNI void KindRows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin,
                                        int64_t row_end, Panel& panel, float* HWY_RESTRICT y) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const size_t stride = row_bytes(w.type, w.n_cols);
  const int64_t n_units = w.n_cols / Kind::kUnitCols;
  auto rows = [&](int64_t r0) { return base + static_cast<size_t>(r0) * stride; };
  auto whole = [&](int64_t r0, int valid) SQUEEZEKV_VNNI_LAMBDA {
    Kind::pack(rows(r0), stride, valid, n_units, panel);
    return Kind::view(panel);
  };
  auto piece = [&](int64_t r0, int valid, int64_t u0, int64_t count) SQUEEZEKV_VNNI_LAMBDA {
    // The next panel's lines, asked of L2 first so that they arrive while this one is packed and
    // used (measured on Q8_0: into L1, two panels ahead, or a line per block as it is packed were
    // slower).
    const int64_t u1 = u0 + count, next_end = std::min(n_units, u1 + Kind::kStreamUnits);
    for (int r = 0; r < valid && u1 < n_units; ++r) {
      const auto* next = reinterpret_cast<const char*>(rows(r0) + static_cast<size_t>(r) * stride);
      for (int64_t b = u1 * Kind::kUnitBytes; b < next_end * Kind::kUnitBytes; b += 64) {
        _mm_prefetch(next + b, _MM_HINT_T1);
      }
    }
    Kind::pack(rows(r0) + u0 * Kind::kUnitBytes, stride, valid, count, panel);
    return Kind::view(panel);
  };
  GroupRows<Kind, Kind::kStreamUnits, Kind>(w, in, row_begin, row_end, y, whole, piece);
}

// Rows of a repacked matrix (repacked_weights.h), for calls of any number of tokens: each view
// points into the matrix itself, so no call regroups rows. Small calls stream pieces with the lines
// of the piece two ahead asked of L2 (1B Q8_0, `bench -p 8,16`: pp16 ~150 without the prefetch, ~180
// with pieces of 8 blocks, ~200 with 4; pieces of 2 or 16, one piece ahead or four, or into L1 were
// slower).

// The pieces [first, first + count) after the current one, asked of the cache while it is used:
// two ahead for most kinds; Q6_K's one-token pieces ask for the next two, so every line is asked
// twice (the output projection of the 1B Q4_K_M model read from memory, `ops_bench
// --benchmark_filter=matmul_from_memory/Q6_K/.*/repacked`, three alternated runs on AMD EPYC: one
// thread 15.0 / 14.9 / 14.2 -> 16.6 / 16.6 / 15.8 GB/s, two 22.6 / 20.8 / 20.2 -> 23.1 / 25.2 /
// 23.4; no gain for Q8_0 or Q4_K, and windows of 3 or 4 pieces were slower).
template <class Kind>
struct PrefetchWindow {
  static constexpr int64_t first = 2, count = 1;
};
// (A kind may specialise it in its own file, as Q6_K's one-token pieces do.)

template <class Kind>
HWY_INLINE SQUEEZEKV_VNNI void RepackedKindRows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin,
                                                int64_t row_end, Panel& panel, float* HWY_RESTRICT y) {
  const int64_t n_units = w.n_cols / Kind::kUnitCols;
  const size_t group_bytes = repacked_group_bytes(w.type, w.n_cols);
  auto group = [&](int64_t r0) {
    return static_cast<const uint8_t*>(w.repacked) + static_cast<size_t>(r0 / kTileRows) * group_bytes;
  };
  auto whole = [&](int64_t r0, int) SQUEEZEKV_VNNI_LAMBDA { return Kind::whole_view(group(r0), n_units, panel); };
  auto piece = [&](int64_t r0, int, int64_t u0, int64_t count) SQUEEZEKV_VNNI_LAMBDA {
    // The window runs on into the next 16 rows of the call, so that their first pieces are in
    // flight too (a 2048-column Q4_K group is 4 pieces: stopping at its end left 2 of them unasked).
    const int64_t p0 = u0 + PrefetchWindow<Kind>::first * count, p1 = p0 + PrefetchWindow<Kind>::count * count;
    const bool window = !OneTokenInOnePiece<Kind>(in.n_tok);
    if (window && p0 < n_units) Kind::repacked_prefetch(group(r0), n_units, p0, std::min(p1, n_units));
    if (window && p1 > n_units && r0 + kTileRows < row_end) {
      Kind::repacked_prefetch(group(r0 + kTileRows), n_units, std::max<int64_t>(p0 - n_units, 0),
                              std::min(p1 - n_units, n_units));
    }
    return Kind::repacked_view(group(r0), n_units, u0, count, panel);
  };
  GroupRows<Kind, Kind::kRepackedStreamUnits, typename Kind::WholeKind>(w, in, row_begin, row_end, y, whole, piece);
}

// One panel per thread for the tiles over GGUF rows and one for those over repacked matrices,
// shared by every weight type of a target.
HWY_INLINE Panel& TiledPanel() {
  thread_local Panel panel;
  return panel;
}
HWY_INLINE Panel& RepackedPanel() {
  thread_local Panel panel;
  return panel;
}

// Rows [row_begin, row_end) of GGUF rows times every token of the call, by Kind's tiles.
template <class Kind>
HWY_NOINLINE SQUEEZEKV_VNNI void TiledRows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin,
                                           int64_t row_end, float* HWY_RESTRICT y) {
  KindRows<Kind>(w, in, row_begin, row_end, TiledPanel(), y);
}

// The same from w's repacked layout (w.repacked set).
template <class Kind>
HWY_NOINLINE SQUEEZEKV_VNNI void RepackedRows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin,
                                              int64_t row_end, float* HWY_RESTRICT y) {
  RepackedKindRows<Kind>(w, in, row_begin, row_end, RepackedPanel(), y);
}

// Groups [g0, g1) of w's repacked layout (repacked_weights.h) into out; the padding after a
// group's last unit, if any, zeroed (defined bytes).
template <class Kind>
HWY_INLINE SQUEEZEKV_VNNI void RepackKindGroups(const WeightMatrix& w, int64_t g0, int64_t g1, uint8_t* out) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const size_t stride = row_bytes(w.type, w.n_cols), group_bytes = repacked_group_bytes(w.type, w.n_cols);
  const size_t used = row_bytes(w.type, w.n_cols) * kTileRows;
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t r0 = g * kTileRows;
    const int valid = static_cast<int>(std::min(kTileRows, w.n_rows - r0));
    uint8_t* group = out + static_cast<size_t>(g) * group_bytes;
    Kind::repack_to(base + static_cast<size_t>(r0) * stride, stride, valid, w.n_cols / Kind::kUnitCols, group);
    std::memset(group + used, 0, group_bytes - used);
  }
}

template <class Kind>
HWY_NOINLINE SQUEEZEKV_VNNI void RepackGroupsOf(const WeightMatrix& w, int64_t g0, int64_t g1, uint8_t* out) {
  RepackKindGroups<Kind>(w, g0, g1, out);
}
#else
#define SQUEEZEKV_VNNI_TILES 0
#endif

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
