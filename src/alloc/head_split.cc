#include "squeezekv/alloc/head_split.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "squeezekv/base/errors.h"

namespace squeezekv {
namespace {

struct Row {
  float priority;
  int64_t position;
  int head;
  int slot;
};

// The eviction order: lower priority first, then the older position, then the lower head.
bool goes_first(const Row& a, const Row& b) {
  if (a.priority != b.priority) return a.priority < b.priority;
  if (a.position != b.position) return a.position < b.position;
  return a.head < b.head;
}

}  // namespace

int head_floor_rows(double floor_share, int budget) {
  require(floor_share >= 0.0 && floor_share <= 1.0, "head_floor", floor_share, "must lie in [0, 1]");
  require(budget >= 0, "budget", budget, "must be at least 0");
  // A hair below the product first: 0.3 * 10 is 3.0000000000000004 in doubles, and must give 3.
  return int(std::ceil(floor_share * double(budget) * (1.0 - 1e-12)));
}

HeadSplit split_heads(std::span<const HeadPriorities> heads, int64_t layer_rows, int floor_rows) {
  require(layer_rows >= 0, "layer_rows", layer_rows, "must be at least 0");
  require(floor_rows >= 0, "floor_rows", floor_rows, "must be at least 0");
  const int n_heads = int(heads.size());
  HeadSplit out{std::vector<int>(heads.size(), 0), std::vector<std::vector<int>>(heads.size())};
  std::vector<Row> pool;  // rows the split may evict: unprotected and beyond their head's floor
  std::vector<Row> head_rows;
  int64_t live = 0;
  for (int h = 0; h < n_heads; ++h) {
    const HeadPriorities& head = heads[size_t(h)];
    require(head.n_slots >= 0, "n_slots", head.n_slots, "must be at least 0");
    require(head.n_slots == 0 || (head.positions != nullptr && head.priority != nullptr), "priority", "null",
            "a head with slots needs positions and priorities");
    head_rows.clear();
    int n_protected = 0;
    for (int s = 0; s < head.n_slots; ++s) {
      if (head.positions[s] < 0) continue;
      ++out.kept[size_t(h)];
      const float p = head.priority[s];
      if (p == std::numeric_limits<float>::infinity()) {
        ++n_protected;
      } else {
        head_rows.push_back({std::isnan(p) ? -std::numeric_limits<float>::infinity() : p, head.positions[s], h, s});
      }
    }
    live += out.kept[size_t(h)];
    // The floor: the head's best rows beyond its protected ones stay out of the pool.
    const size_t keep = size_t(std::clamp<int64_t>(int64_t(floor_rows) - n_protected, 0, int64_t(head_rows.size())));
    const auto first_kept = head_rows.end() - std::ptrdiff_t(keep);
    std::nth_element(head_rows.begin(), first_kept, head_rows.end(), goes_first);
    pool.insert(pool.end(), head_rows.begin(), first_kept);
  }
  if (live <= layer_rows) return out;
  const size_t excess = size_t(std::min<int64_t>(live - layer_rows, int64_t(pool.size())));
  std::nth_element(pool.begin(), pool.begin() + std::ptrdiff_t(excess), pool.end(), goes_first);
  for (size_t i = 0; i < excess; ++i) {
    const Row& row = pool[i];
    out.evict[size_t(row.head)].push_back(row.slot);
    --out.kept[size_t(row.head)];
  }
  for (std::vector<int>& slots : out.evict) std::sort(slots.begin(), slots.end());
  return out;
}

}  // namespace squeezekv
