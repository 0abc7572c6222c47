// Q4_0 weights (16 bytes of nibbles and an fp16 d a 32-element block; value = d * (q - 8)): the
// nibble family's row kernel and prompt tiles (matmul_nibbles-inl.h) and repacked layout
// (matmul_nibbles_repacked-inl.h). Compiled once per SIMD target (foreach_target); the driver
// (matmul.cc) reaches MatmulRowsQ4_0 through the traits table (tensor_type.cc).
// clang-format off: the target include must come first, then foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul_q4_0.cc"
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

// Q4_0's blocks for the nibble kernels (matmul_nibbles-inl.h).
struct Q4_0Format {
  static constexpr bool kHasMin = false, kFifthBit = false;
  static constexpr int64_t kBlockBytes = quant::q4_0_bytes, kCodesOffset = 2, kFifthBitsOffset = 0;
  static constexpr int16_t kOffset = 8;
  static constexpr int kOffsetShift = 4;
};
static_assert(quant::q4_0_elems == 32);

#if SQUEEZEKV_VNNI_TILES
using Q4_0Tiles = OffsetNibbleTiles<Q4_0Format>;
using Q4_0RepackedTiles = NibbleRepackedTiles<Q4_0Format, Q4_0Tiles>;
#endif

struct Q4_0Rows {
  template <int K>
  static HWY_INLINE void Dots(const uint8_t* row, const TokenQ8* x, int64_t n, float* out) {
    NibbleDots<Q4_0Format, K>(row, x, n, out);
  }
};

// Rows [row_begin, row_end) of w times every token of the call.
void MatmulRowsQ4_0(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end,
                    float* HWY_RESTRICT y) {
#if SQUEEZEKV_VNNI_TILES
  if (w.repacked != nullptr && HasVnni()) return RepackedRows<Q4_0RepackedTiles>(w, in, row_begin, row_end, y);
  if (UseTiles(in.n_tok, kTileMinTokens)) return TiledRows<Q4_0Tiles>(w, in, row_begin, row_end, y);
#endif
#if SQUEEZEKV_X86_BYTE_DOT
  if (w.repacked != nullptr) return HalfTileRows<NibbleHalfTiles<Q4_0Format>>(w, in, row_begin, row_end, y);
#endif
  QuantizedRows<Q4_0Rows>(w, in, row_begin, row_end, y);
}

// Groups [group_begin, group_end) of w's repacked layout into out (repack_groups checks that
// this target can: can_repack).
void RepackGroupsQ4_0(const WeightMatrix& w, int64_t group_begin, int64_t group_end, uint8_t* out) {
#if SQUEEZEKV_VNNI_TILES
  if (HasVnni()) return RepackGroupsOf<Q4_0RepackedTiles>(w, group_begin, group_end, out);
#endif
  repacked::nibble_repack_groups_by_copies({.fifth_bits = false, .minimum = false}, w, group_begin, group_end, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(MatmulRowsQ4_0);
HWY_EXPORT(RepackGroupsQ4_0);

namespace {

void rows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end, float* y) {
  HWY_DYNAMIC_DISPATCH(MatmulRowsQ4_0)(w, in, row_begin, row_end, y);
}

void repack_groups(const WeightMatrix& w, int64_t group_begin, int64_t group_end, uint8_t* out) {
  HWY_DYNAMIC_DISPATCH(RepackGroupsQ4_0)(w, group_begin, group_end, out);
}

void read_unit(const uint8_t* group, int64_t n_blocks, int64_t j, size_t lane, uint8_t* block) {
  repacked::read_nibble_unit({.fifth_bits = false, .minimum = false}, group, n_blocks, j, lane, block);
}

constexpr detail::RepackedLayout kRepacked{repack_groups, read_unit};

}  // namespace

extern const detail::WeightKernels q4_0_kernels;
const detail::WeightKernels q4_0_kernels{rows, &kRepacked};

}  // namespace squeezekv
#endif  // HWY_ONCE
