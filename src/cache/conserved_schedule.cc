#include "squeezekv/cache/conserved_schedule.h"

#include <algorithm>
#include <string>

#include "squeezekv/alloc/conserve_budgets.h"
#include "squeezekv/base/errors.h"

namespace squeezekv {

void ConservedSchedule::set(std::vector<int> budgets, std::vector<bool> scheduled) {
  require(budgets.size() == scheduled.size(), "scheduled.size()", scheduled.size(),
          "must equal budgets.size() = " + std::to_string(budgets.size()));
  budgets_ = std::move(budgets);
  scheduled_ = std::move(scheduled);
  schedule_.clear();
  for (size_t i = 0; i < budgets_.size(); ++i) {
    if (scheduled_[i]) schedule_.push_back(budgets_[i]);
  }
  least_ = schedule_.empty() ? 0 : *std::min_element(schedule_.begin(), schedule_.end());
  most_ = schedule_.empty() ? 0 : *std::max_element(schedule_.begin(), schedule_.end());
  cap_ = -1;
}

void ConservedSchedule::clear() {
  budgets_.clear();
  scheduled_.clear();
  schedule_.clear();
  cap_ = -1;
}

int ConservedSchedule::budget(int layer, int64_t cap) {
  require(layer >= 0 && size_t(layer) < budgets_.size() && scheduled_[size_t(layer)], "layer", layer,
          "is not a scheduled layer of this schedule");
  // Every layer within the cap (the schedule itself), or every layer at it (each holds all it has
  // seen); else the schedule conserved at this cap, once per cap, into buffers kept here.
  if (cap >= most_) return budgets_[size_t(layer)];
  if (cap <= least_) return int(std::max<int64_t>(cap, 1));
  if (cap != cap_) {
    conserve_budgets_into(schedule_, std::max<int64_t>(cap, 1), held_, scratch_);
    conserved_.assign(budgets_.size(), 0);
    for (size_t i = 0, k = 0; i < budgets_.size(); ++i) {
      if (scheduled_[i]) conserved_[i] = held_[k++];
    }
    cap_ = cap;
  }
  return conserved_[size_t(layer)];
}

}  // namespace squeezekv
