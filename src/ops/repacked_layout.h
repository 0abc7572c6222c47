// Byte offsets of the repacked layouts (squeezekv/ops/repacked_weights.h describes them), shared
// by the SIMD writer and tiles (matmul_tiles-inl.h) and the scalar row reader (repacked_weights.cc).
#pragma once

#include <cstddef>

namespace squeezekv::repacked {

// Q8_0, per 16 rows: each block's codes (8 vectors); the fp16 d of all blocks after the last.
inline constexpr size_t kQ8_0CodeBytes = 8 * 64, kQ8_0HalfBytes = 32;

// Q4_K, per 16 rows and super-block: qs (32 vectors), d then dmin (16 fp16 each), scale words.
inline constexpr size_t kQ4_KHalves = 32 * 64, kQ4_KWords = kQ4_KHalves + 64, kQ4_KUnitBytes = kQ4_KWords + 3 * 64;

// Q6_K, per 16 rows and super-block: ql (32 vectors), qh (16), scale words (4); the fp16 d of all
// super-blocks after the last.
inline constexpr size_t kQ6_KQh = 32 * 64, kQ6_KWords = kQ6_KQh + 16 * 64, kQ6_KUnitBytes = kQ6_KWords + 4 * 64;

}  // namespace squeezekv::repacked
