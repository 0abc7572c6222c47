// Q4_1 weights (16 bytes of nibbles, an fp16 d and an fp16 minimum m a 32-element block; value =
// d * q + m): the nibble family's row kernel and prompt tiles (matmul_nibbles-inl.h) and
// repacked layout (matmul_nibbles_repacked-inl.h). Compiled once per SIMD target
// (foreach_target); the driver (matmul.cc) reaches MatmulRowsQ4_1 through the traits table
// (tensor_type.cc).
// clang-format off: the target include must come first, then foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul_q4_1.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ops/activation_q8.h"
#include "ops/matmul_nibbles-inl.h"
#include "ops/matmul_nibbles_repacked-inl.h"
#include "ops/matmul_rows-inl.h"
#include "ops/matmul_tiles-inl.h"
#include "ops/nibble_repacked_layout.h"
#include "ops/quant_formats.h"
#include "ops/weight_kernels.h"
#include "squeezekv/ops/repacked_weights.h"
#include "squeezekv/ops/weight_matrix.h"

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Q4_1's blocks for the nibble kernels (matmul_nibbles-inl.h).
struct Q4_1Format {
  static constexpr bool kHasMin = true, kFifthBit = false;
  static constexpr int64_t kBlockBytes = quant::q4_1_bytes, kCodesOffset = quant::q4_1_qs_offset, kFifthBitsOffset = 0;
  static constexpr int16_t kOffset = 8;  // unused: Q4_1 has a minimum instead
  static constexpr int kOffsetShift = 4;
};
static_assert(quant::q4_1_elems == 32);

#if SQUEEZEKV_VNNI_TILES
struct Q4_1Tiles : PanelView {
  static constexpr int64_t kUnitCols = quant::q4_1_elems, kUnitBytes = quant::q4_1_bytes, kStreamUnits = 16;
  static constexpr int kMaxTokens = 4;

  // Q4_1: the nibble panel with the rows' minimum m as factor_min.
  static HWY_INLINE SQUEEZEKV_VNNI void pack(const uint8_t* rows, size_t stride, int valid, int64_t n_blocks,
                                             Panel& panel) {
    PackNibbleRows<Q4_1Format>(rows, stride, valid, n_blocks, panel);
  }

  // Q4_1: the code term into a0 and the minimum term into a1, each as its row kernel sums it (runs
  // of 8 blocks as trees, then the remaining blocks one by one; a streamed row's panels are runs of
  // 8 until the last).
  template <int T>
  static HWY_INLINE SQUEEZEKV_VNNI void tile(View panel, int64_t n_blocks, const TokenQ8* x, int64_t x0, __m512* a0,
                                             __m512* a1) {
    const auto* const min_ptr = panel->factor_min.data();
    auto product = [&](int64_t j, __m512* p)
                       SQUEEZEKV_VNNI_LAMBDA { NibbleProducts<Q4_1Format, T>(*panel, x, x0, j, p); };
    auto minimum = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA {
      for (int k = 0; k < T; ++k) p[k] = _mm512_mul_ps(min_ptr[j], _mm512_set1_ps(x[k].scaled_sum[x0 + j]));
    };
    AddBlocksInOrder<T>(product, n_blocks, a0);
    AddBlocksInOrder<T>(minimum, n_blocks, a1);
  }

  static HWY_INLINE SQUEEZEKV_VNNI __m512 combine(__m512 a0, __m512 a1) { return _mm512_add_ps(a0, a1); }
};
static_assert(Q4_1Tiles::kStreamUnits % 8 == 0, "streamed panels must keep the row kernel's trees");
#endif  // SQUEEZEKV_VNNI_TILES

#if SQUEEZEKV_VNNI_TILES
using Q4_1RepackedTiles = NibbleRepackedTiles<Q4_1Format, Q4_1Tiles>;
#endif

struct Q4_1Rows {
  template <int K>
  static HWY_INLINE void Dots(const uint8_t* row, const TokenQ8* x, int64_t n, float* out) {
    NibbleDots<Q4_1Format, K>(row, x, n, out);
  }
};

// Rows [row_begin, row_end) of w times every token of the call.
void MatmulRowsQ4_1(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end,
                    float* HWY_RESTRICT y) {
#if SQUEEZEKV_VNNI_TILES
  if (w.repacked != nullptr && HasVnni()) return RepackedRows<Q4_1RepackedTiles>(w, in, row_begin, row_end, y);
  if (UseTiles(in.n_tok, kTileMinTokens)) return TiledRows<Q4_1Tiles>(w, in, row_begin, row_end, y);
#endif
#if SQUEEZEKV_X86_BYTE_DOT
  if (w.repacked != nullptr) return HalfTileRows<NibbleHalfTiles<Q4_1Format>>(w, in, row_begin, row_end, y);
#endif
  QuantizedRows<Q4_1Rows>(w, in, row_begin, row_end, y);
}

// Groups [group_begin, group_end) of w's repacked layout into out (repack_groups checks that
// this target can: can_repack).
void RepackGroupsQ4_1(const WeightMatrix& w, int64_t group_begin, int64_t group_end, uint8_t* out) {
#if SQUEEZEKV_VNNI_TILES
  if (HasVnni()) return RepackGroupsOf<Q4_1RepackedTiles>(w, group_begin, group_end, out);
#endif
  repacked::nibble_repack_groups_by_copies({.fifth_bits = false, .minimum = true}, w, group_begin, group_end, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(MatmulRowsQ4_1);
HWY_EXPORT(RepackGroupsQ4_1);

namespace {

void rows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end, float* y) {
  HWY_DYNAMIC_DISPATCH(MatmulRowsQ4_1)(w, in, row_begin, row_end, y);
}

void repack_groups(const WeightMatrix& w, int64_t group_begin, int64_t group_end, uint8_t* out) {
  HWY_DYNAMIC_DISPATCH(RepackGroupsQ4_1)(w, group_begin, group_end, out);
}

void read_unit(const uint8_t* group, int64_t n_blocks, int64_t j, size_t lane, uint8_t* block) {
  repacked::read_nibble_unit({.fifth_bits = false, .minimum = true}, group, n_blocks, j, lane, block);
}

constexpr detail::RepackedLayout kRepacked{repack_groups, read_unit};

}  // namespace

extern const detail::WeightKernels q4_1_kernels;
const detail::WeightKernels q4_1_kernels{rows, &kRepacked};

}  // namespace squeezekv
#endif  // HWY_ONCE
