#include "squeezekv/alloc/conserve_budgets.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "squeezekv/base/errors.h"

namespace squeezekv {

std::vector<int> conserve_budgets(std::span<const int> schedule, int64_t cap) {
  std::vector<int> out;
  ConserveScratch scratch;
  conserve_budgets_into(schedule, cap, out, scratch);
  return out;
}

void conserve_budgets_into(std::span<const int> schedule, int64_t cap, std::vector<int>& out,
                           ConserveScratch& scratch) {
  require(cap >= 1, "cap", cap, "must be at least 1 (the rows a layer can hold)");
  int64_t total = 0;
  bool over = false;
  for (size_t i = 0; i < schedule.size(); ++i) {
    require(schedule[i] >= 0, "schedule[" + std::to_string(i) + "]", schedule[i], "must be at least 0");
    total += schedule[i];
    over = over || schedule[i] > cap;
  }
  out.assign(schedule.begin(), schedule.end());
  if (!over) return;
  const auto n = int64_t(schedule.size());
  const int64_t target = std::min(total, n * cap);
  // Water-filling: each pass caps the layers whose scaled share reaches the cap; the rest share
  // what remains in proportion to their schedule. At most n passes (each caps one more layer).
  std::vector<bool>& capped = scratch.capped;
  capped.assign(schedule.size(), false);
  double scale = 1.0;
  for (size_t pass = 0; pass <= schedule.size(); ++pass) {
    int64_t free_rows = target, free_weight = 0;
    for (size_t i = 0; i < schedule.size(); ++i) {
      if (capped[i]) free_rows -= cap;
      else free_weight += schedule[i];
    }
    if (free_weight == 0) break;
    scale = double(free_rows) / double(free_weight);
    bool newly = false;
    for (size_t i = 0; i < schedule.size(); ++i) {
      if (!capped[i] && scale * schedule[i] >= double(cap)) capped[i] = newly = true;
    }
    if (!newly) break;
  }
  std::vector<double>& share = scratch.share;
  share.resize(schedule.size());
  int64_t assigned = 0;
  for (size_t i = 0; i < schedule.size(); ++i) {
    share[i] = capped[i] ? double(cap) : std::min(double(cap), scale * schedule[i]);
    out[i] = int(std::floor(share[i]));
    assigned += out[i];
  }
  // Largest remainder first, ties to the lower index; never past the cap.
  // A total order (ties broken by index) so that std::sort, which allocates nothing, is
  // deterministic.
  std::vector<size_t>& order = scratch.order;
  order.resize(schedule.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const double ra = share[a] - std::floor(share[a]), rb = share[b] - std::floor(share[b]);
    return ra != rb ? ra > rb : a < b;
  });
  for (size_t k = 0; assigned < target && k < order.size(); ++k) {
    if (out[order[k]] < cap) {
      ++out[order[k]];
      ++assigned;
    }
  }
  // Floating-point rounding can leave a row or two: any layer below the cap takes them, in order.
  for (size_t i = 0; assigned < target && i < out.size(); ++i) {
    const int64_t room = std::min<int64_t>(cap - out[i], target - assigned);
    out[i] += int(room);
    assigned += room;
  }
}

}  // namespace squeezekv
