// Keys turned back by their RoPE shifts (positions inside the cache, docs/positions.md): the
// turn in place on decoded rows, compiled once per instruction set by Highway; rotate_rows_back,
// the dots of queries with turned keys (a format's fused kernel, else a tile of rows at a time),
// their scalar twins and the turn table's rows.
#include <algorithm>
#include <vector>

#include "ops/kv_format_kernels.h"
#include "squeezekv/ops/kv_rows.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/kv_rope_turn.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One row's first n_rot elements, in place: o[i] = o[i] * cos[i] + o[partner(i)] * sin[i].
HWY_INLINE void TurnScalar(float* o, size_t n_rot, bool neox, const float* cs, const float* sn) {
  const size_t half = n_rot / 2;
  for (size_t i = 0; i < half; ++i) {
    const size_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    const float x0 = o[a], x1 = o[b];
    o[a] = x0 * cs[a] + x1 * sn[a];
    o[b] = x1 * cs[b] + x0 * sn[b];
  }
}

// Rows already decoded to f32 in `out`, turned in place.
void TurnRowsBack(const int32_t* shifts, size_t n_rows, size_t dim, size_t n_rot, bool neox, const float* turns,
                  float* out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const size_t half = n_rot / 2;
  const bool vec = N >= 2 && (neox ? half % N == 0 : n_rot % N == 0);
  for (size_t j = 0; j < n_rows; ++j) {
    if (shifts[j] <= 0) continue;
    float* o = out + j * dim;
    const float* cs = turns + size_t(shifts[j]) * 2 * n_rot;
    const float* sn = cs + n_rot;
    if (!vec) {
      TurnScalar(o, n_rot, neox, cs, sn);
    } else if (!neox) {  // pairs are adjacent lanes: the partner vector is x with pairs swapped
      for (size_t i = 0; i < n_rot; i += N) {
        const auto x = hn::LoadU(d, o + i);
        const auto turned =
            hn::Add(hn::Mul(x, hn::LoadU(d, cs + i)), hn::Mul(hn::Reverse2(d, x), hn::LoadU(d, sn + i)));
        hn::StoreU(turned, d, o + i);
      }
    } else {
      for (size_t i = 0; i < half; i += N) {
        const auto lo = hn::LoadU(d, o + i), hi = hn::LoadU(d, o + i + half);
        hn::StoreU(hn::Add(hn::Mul(lo, hn::LoadU(d, cs + i)), hn::Mul(hi, hn::LoadU(d, sn + i))), d, o + i);
        hn::StoreU(hn::Add(hn::Mul(hi, hn::LoadU(d, cs + i + half)), hn::Mul(lo, hn::LoadU(d, sn + i + half))), d,
                   o + i + half);
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(TurnRowsBack);

void rotate_rows_back(const void* rows, KVType type, const int32_t* shifts, size_t n_rows, size_t head_dim,
                      size_t n_rot, bool neox, const float* turns, float* out) {
  load_rows(rows, type, out, n_rows * head_dim, head_dim);
  HWY_DYNAMIC_DISPATCH(TurnRowsBack)(shifts, n_rows, head_dim, n_rot, neox, turns, out);
}

// The format's kernel turns float rows in registers where their vectors fit; the rest (block
// formats, odd sizes) are decoded and turned a tile of rows at a time on the stack (L1, never a
// copy of the head's rows), then dotted as f32 rows.
void row_dots_rotated(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type, const int32_t* shifts,
                      size_t n_rows, size_t head_dim, size_t n_rot, bool neox, const float* turns, float* out,
                      size_t ld_out) {
  const KVRowKernels& kernels = kv_row_kernels(type);
  if (kernels.turned_dots != nullptr &&
      kernels.turned_dots(q, n_q, ld_q, rows, shifts, n_rows, head_dim, n_rot, neox, turns, out, ld_out)) {
    return;
  }
  // A tile of 16 KiB: 64 rows at head_dim 64; a row's dot is the same bits in any tile.
  constexpr size_t kTileFloats = 4096;
  alignas(64) float stack[kTileFloats];
  std::vector<float> heap;
  float* tile = stack;
  const size_t tile_rows = std::max<size_t>(1, kTileFloats / head_dim);
  if (head_dim > kTileFloats) {
    heap.resize(head_dim);
    tile = heap.data();
  }
  const size_t rb = kv_row_bytes(type, head_dim);
  const auto* base = static_cast<const uint8_t*>(rows);
  for (size_t j = 0; j < n_rows; j += tile_rows) {
    const size_t count = std::min(tile_rows, n_rows - j);
    rotate_rows_back(base + j * rb, type, shifts + j, count, head_dim, n_rot, neox, turns, tile);
    row_dots_group(q, n_q, ld_q, tile, KVType::f32, count, head_dim, out + j, ld_out);
  }
}

void rotate_rows_back_scalar(const void* rows, KVType type, const int32_t* shifts, size_t n_rows, size_t head_dim,
                             size_t n_rot, bool neox, const float* turns, float* out) {
  const KVRowKernels& kernels = kv_row_kernels(type);
  const size_t rb = kv_row_bytes(type, head_dim);
  for (size_t j = 0; j < n_rows; ++j) {
    kernels.load_row_scalar(static_cast<const uint8_t*>(rows) + j * rb, head_dim, out + j * head_dim);
  }
  const size_t half = n_rot / 2;
  for (size_t j = 0; j < n_rows; ++j) {
    if (shifts[j] <= 0) continue;
    float* o = out + j * head_dim;
    const float* cs = turns + size_t(shifts[j]) * 2 * n_rot;
    const float* sn = cs + n_rot;
    for (size_t i = 0; i < half; ++i) {
      const size_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
      const float x0 = o[a], x1 = o[b];
      o[a] = x0 * cs[a] + x1 * sn[a];
      o[b] = x1 * cs[b] + x0 * sn[b];
    }
  }
}

void row_dots_rotated_scalar(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type,
                             const int32_t* shifts, size_t n_rows, size_t head_dim, size_t n_rot, bool neox,
                             const float* turns, float* out, size_t ld_out) {
  std::vector<float> turned(n_rows * head_dim);
  rotate_rows_back_scalar(rows, type, shifts, n_rows, head_dim, n_rot, neox, turns, turned.data());
  row_dots_group_scalar(q, n_q, ld_q, turned.data(), KVType::f32, n_rows, head_dim, out, ld_out);
}

void rope_turn_row(const float* cos_sin, size_t n_rot, bool neox, float* turn) {
  // R(-s) per pair (a, b): a' = a cos + b sin, b' = b cos - a sin.
  float* cs = turn;
  float* sn = turn + n_rot;
  const size_t half = n_rot / 2;
  for (size_t i = 0; i < half; ++i) {
    const size_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    cs[a] = cs[b] = cos_sin[2 * i];
    sn[a] = cos_sin[2 * i + 1];
    sn[b] = -cos_sin[2 * i + 1];
  }
}

}  // namespace squeezekv
#endif  // HWY_ONCE
