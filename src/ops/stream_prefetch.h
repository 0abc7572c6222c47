// Software prefetch for kernels that stream through memory: the GGUF-row weight kernels (one-token
// products with --no-repack or without AVX512-VNNI) and the K/V rows of a long decode step. The
// hardware prefetcher alone leaves both waiting on loads (docs/results.md "Rows asked for ahead").
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

}  // namespace squeezekv
