// Software prefetch for kernels that stream through memory: the GGUF-row weight kernels (one-token
// products with --no-repack or without AVX512-VNNI) and the K/V rows of a long decode step. The
// hardware prefetcher alone leaves both waiting on loads (docs/notes/stories260k.md "Rows asked for ahead").
// The repacked weight tiles ask for whole pieces into L2 instead (PrefetchWindow, matmul_tiles-inl.h),
// except the one-token tiles of Q8_0 and the nibble formats, which ask for each block's lines here
// as they read a block.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hwy/cache_control.h"

namespace squeezekv {

// How far ahead a stream asks for its lines.
inline constexpr size_t kPrefetchAheadBytes = 1024;
inline constexpr size_t kCacheLineBytes = 64;

// Asks for `bytes` of the stream (whole cache lines) `distance` bytes ahead of p. Near the
// stream's end the addresses run past it: they are formed as integers (a pointer past its array is
// undefined), and a prefetch never faults.
HWY_INLINE void prefetch_ahead(const void* p, size_t bytes, size_t distance = kPrefetchAheadBytes) {
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(p) + distance;
  for (size_t line = 0; line < bytes; line += kCacheLineBytes)
    hwy::Prefetch(reinterpret_cast<const void*>(ahead + line));
}

// For a tile reading block j of a stream of unit_bytes a block (block_j its address): asks for
// block j + blocks_ahead, whole lines, once a line (units under a line share it: only every
// kCacheLineBytes / unit_bytes blocks). Every stream a tile reads (codes, scales, fifth bits)
// then runs the same number of blocks ahead.
HWY_INLINE void prefetch_block_ahead(const void* block_j, int64_t j, size_t unit_bytes, size_t blocks_ahead) {
  const auto blocks_a_line = static_cast<int64_t>(kCacheLineBytes / unit_bytes);
  if (blocks_a_line > 1 && j % blocks_a_line != 0) return;
  prefetch_ahead(block_j, unit_bytes < kCacheLineBytes ? kCacheLineBytes : unit_bytes, blocks_ahead * unit_bytes);
}

}  // namespace squeezekv
