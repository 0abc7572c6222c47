// Software prefetch for kernels that stream through memory: the weights of a one-token product and
// the K/V rows of a long decode step. The hardware prefetcher alone leaves both waiting on loads
// (docs/architecture.md "Repacked weights"; docs/results.md "Rows asked for ahead").
#pragma once

#include <cstddef>
#include <cstdint>

#include "hwy/cache_control.h"

namespace squeezekv {

// How far ahead a stream asks for its lines.
inline constexpr size_t kPrefetchAheadBytes = 1024;

// Asks for `bytes` of the stream (whole 64-byte lines) kPrefetchAheadBytes ahead of p. Near the
// stream's end the addresses run past it: they are formed as integers (a pointer past its array is
// undefined), and a prefetch never faults.
HWY_INLINE void prefetch_ahead(const void* p, size_t bytes) {
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(p) + kPrefetchAheadBytes;
  for (size_t line = 0; line < bytes; line += 64) hwy::Prefetch(reinterpret_cast<const void*>(ahead + line));
}

}  // namespace squeezekv
