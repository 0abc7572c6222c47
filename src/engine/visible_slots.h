// Which of a head's slots a query may see, for both attention paths (engine_attention.cc and
// prompt_attention.cc): live, not after the query, and not before its window.
#pragma once

#include <cstdint>

#include "squeezekv/core/head_store.h"

namespace squeezekv {

// The first and one past the last visible slot ([n_slots, 0) when none is).
struct VisibleSpan {
  int lo = 0, hi = 0;
};

// mask[s] = whether slot s holds a position in [oldest, query_pos]. Branch-free: free slots lie
// among live ones at random.
inline VisibleSpan mark_visible_slots(const int64_t* pos, int n_slots, int64_t query_pos, int64_t oldest,
                                      uint8_t* mask) {
  VisibleSpan span{n_slots, 0};
  for (int s = 0; s < n_slots; ++s) {
    const bool seen = (pos[s] != HeadStore::kFree) & (pos[s] <= query_pos) & (pos[s] >= oldest);
    mask[s] = seen;
    span.lo = seen & (span.lo == n_slots) ? s : span.lo;
    span.hi = seen ? s + 1 : span.hi;
  }
  return span;
}

}  // namespace squeezekv
