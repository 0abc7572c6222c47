// The head split (Ada-KV, Feng et al. 2024, arXiv:2407.11550; kvpress's AdaKVPress): how one
// layer's rows are shared among its KV heads, the axis between the layer allocator (rows per layer)
// and the token policy (which rows of a head). The uniform split gives every head the layer's
// budget B; Ada-KV keeps the top H x B rows of the H heads together by the policy's keep priority,
// each head keeping at least a floor of them (docs/architecture.md, "The head split").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace squeezekv {

// One head's rows as the split reads them, slot-indexed over [0, n_slots): a free slot's position
// is negative (HeadStore::kFree); a priority of +inf marks a row the policy protects (kept
// whatever the split), a NaN priority counts as the lowest.
struct HeadPriorities {
  const int64_t* positions = nullptr;
  const float* priority = nullptr;
  int n_slots = 0;
};

struct HeadSplit {
  std::vector<int> kept;                // per head: the rows it holds after the split
  std::vector<std::vector<int>> evict;  // per head: the slots that go, ascending
};

// The rows a head keeps at least: ceil(floor_share * budget), floor_share in [0, 1]
// (kvpress's alpha_safeguard; 1 = every head its budget, the uniform split).
int head_floor_rows(double floor_share, int budget);

// Ada-KV over the heads of one sequence: when they hold more than `layer_rows` live rows together,
// the lowest rows by (priority, position, head) go until `layer_rows` remain, except each head's
// protected rows and its `floor_rows` best rows (protected first, then by priority, the newer on
// equal priority). When protected and floor rows alone exceed `layer_rows`, they all stay.
HeadSplit split_heads(std::span<const HeadPriorities> heads, int64_t layer_rows, int floor_rows);

}  // namespace squeezekv
